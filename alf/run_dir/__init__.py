"""The run directory: the one owner of a run's files and of the checkpoint format.

* :mod:`alf.run_dir.layout`: the names of the files in a run directory and how to read
  and write the small ones (config, progress, status, metadata); no torch, so the
  tools that read many runs start fast.
* :mod:`alf.run_dir.metadata`: ``run_info.json`` and ``code.diff``, how a run was started
  and resumed.
* :mod:`alf.run_dir.checkpoints`: the checkpoint files, their keys and what each
  component saves in them (:class:`~alf.run_dir.checkpoints.RunCheckpoint`).

The trainer, ``alf.bin.play``, resuming and offline data all go through these modules.
"""
