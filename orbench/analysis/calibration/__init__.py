"""Judge cards: measure a judge against human labels (``orbench-calibrate``)."""
