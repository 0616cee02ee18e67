"""Stage 1, read: find the input files, tell their format, step and split (`discover`), plan
them into units (`units`), and read each through its format (`registry`). A format is one
package here (`jsonl`, `parquet`, `slime_pt`, `nemo_rl`, `miles`, `prime_rl`), whose
descriptor (`format.Format`) names its reader, detector, splitter and train reader; `train_pt`
reads the trainer's side (slime's train dumps), and `base` and `columns` are the reader
contract every format hands its chunks on in."""
