"""The contract between the operators (Airflow side) and the PySpark job (cluster side).

The operators build an action's spec, check it with ``validated()`` before Spark starts, wrap it
in a :class:`~.request.JobRequest` and turn that into spark-submit application arguments with
``to_argv()``; the job parses them back with :func:`~.request.parse_argv`, which runs the same
``validated()``. Standard library only: the operators import this while Airflow parses DAGs, and
it ships to the Spark driver in the job archive.

One module per job, none importing another's private names, no import cycles:

- :mod:`.errors`: :class:`~.errors.InvalidSpecError`, whose message names the offending field.
- :mod:`.identifiers`: table, column, branch and tag names: split, validate, quote.
- :mod:`.sql_text`: user text that reaches SQL: queries, conditions, expressions.
- :mod:`.options`: Spark and Iceberg option maps, keys and typed values.
- :mod:`.action`: :class:`~.action.ActionSpec`, the one pattern every action follows.
- :mod:`.sources`: where a write's or a merge's rows come from.
- :mod:`.writes`, :mod:`.reads`, :mod:`.row_changes` (merge, delete), :mod:`.branches` (publish,
  tag, rollback), :mod:`.upkeep` (expire, rewrites, orphan files): the actions, by family.
- :mod:`.registry`: every action by its subcommand; builds the job's parser from the specs.
- :mod:`.request`: :class:`~.request.JobRequest` (the spec, commit id, result file, secrets
  file) and :func:`~.request.parse_argv`.
"""
