"""One rank's whole job: build the Trainer and its parts from the resolved config, run the stages
(fit, export, test, predict, benchmark repeats), collect the results (rank 0 writes
results.json), record an interruption, clean up. May import: callbacks, loggers, report and
every layer below them."""
