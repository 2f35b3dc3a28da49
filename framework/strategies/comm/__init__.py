"""What the communicating strategies share: collectives as plain functions, joining the process
group, the bytes each collective sends."""
