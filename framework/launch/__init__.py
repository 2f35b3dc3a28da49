"""Starting a job's ranks: ``entry`` (how ranks start for a config), ``local`` (the elastic
agent and spawn on this machine), ``fork_server`` (what forks them, started early), and
``main_module`` (keeping the user's script out of the ranks). Nothing is imported here, so
that the light modules stay light (``--help`` never imports torch)."""
