"""Starting a job's ranks and watching them: ``start`` (how ranks start for a config), ``elastic``
and ``spawn`` (N local ranks), ``servers`` (what forks the ranks or a packed sweep's
jobs, started early), ``packed_job`` (a packed sweep's job in its process), ``failures``
(which rank failed first and why), ``main_module`` (keeping the user's script out of the ranks),
``process_exit`` (ending a process without the interpreter's teardown). Nothing is imported
here, so that the light modules stay light (``--help`` never imports torch).
May import: rank and every layer below it."""
