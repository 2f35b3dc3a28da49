"""``hydra/launcher=packed``: a sweep's jobs side by side on this machine's free devices."""
