"""Research workflow on top of training: seeds and grids (:mod:`.sweep`), reading and
grouping finished or running run directories (:mod:`.runs`), statistics over seeds
(:mod:`.stats`), curves (:mod:`.plotting`), result tables (:mod:`.report`) and tuning
(:mod:`.tune`). Every run is an ordinary ``alf.bin.train`` process in its own run
directory; these modules only launch runs and read their files, never import torch at
module level, so the command-line tools start fast."""
