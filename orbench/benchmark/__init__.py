"""The benchmark's data: the ten categories, the named prompt sets and the stages' prompt
templates."""
