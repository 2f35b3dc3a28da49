"""The framework's default sweeper (``hydra/sweeper=framework``): Hydra's basic sweeper, where a
key given on the command line replaces the experiment's ``hydra.sweeper.params`` entry for it."""
