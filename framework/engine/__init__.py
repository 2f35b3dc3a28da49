"""The training engine: loop, precision, seeding, scheduler stepping, results."""
