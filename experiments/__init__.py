"""The lab's experiments: one file per experiment, runnable as ``python experiments/<name>.py`` and importable
as ``experiments.<name>`` (the package is installed with the lab; nothing in ``marin`` imports it)."""
