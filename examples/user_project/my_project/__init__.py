"""A user's own project: a model, a DataModule and a task, trained by the framework."""
