"""Sub-commands of the ``mara`` CLI, one module each."""
