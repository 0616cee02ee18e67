"""The trainer's side of a step (`audit --train`): slime's train-side `.pt` dumps, the train
reader of the `pt` format (reader.py), and `TrainDump`, the checked form every format's train
reader hands on (another framework's reader builds a payload shaped like slime's and passes it
to `reader.from_payload`)."""
