"""One experiment, in the process the user started: validate it and check it against the machine
and the run directory before any rank starts (preflight), write config.yaml, launch its ranks,
return its results; plan its memory; the saved config of a run to evaluate.
May import: launch and every layer below it."""
