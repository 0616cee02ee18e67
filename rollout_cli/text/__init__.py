"""Text through a run's tokenizer: loading it (tokenizer.py), encoding text dumps into token rows,
decoding token ids for display (pieces.py), and rendering a chat template to check stored tokens
against (template.py, drift.py). Needs the `text` extra (`tokenizers`, `jinja2`), imported on
first use only."""
