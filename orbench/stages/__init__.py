"""The five pipeline stages, one module each, with ``build_parser``/``main(argv) -> exit code``.

``generate_seeds`` (stage 1), ``rewrite`` (2), ``moderate`` (3), ``check_alignment`` (4) and
``check_response`` (5). The runnable scripts in the project's stage folders
(``toxic_prompt_generator/``, ``rewritter/``, ``moderator/``, ``alignment_checker/``,
``response_checker/``), the original tool's script names among them, are thin entry points
that call ``main`` here; the console scripts (``orbench-generate`` ...) do the same.
"""
