"""Subcommands of the ``tformer`` command line, one module each."""
