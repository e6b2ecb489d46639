"""The `vcm` command line: a process entry point (it may wire workers in)."""
