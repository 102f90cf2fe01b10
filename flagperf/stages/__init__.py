"""The stages of a run, in the order ``flagperf.pipeline.Run`` calls them: ``check`` (connect, deploy, probe
every host), ``prepare`` (the run directory, the final plan, a case's preparation), ``round`` (one round: start,
``wait``, stop and collect, ``judge``) and ``finish`` (reference verdicts, rankings, summary.json, the reports).
Every stage works on one :class:`~flagperf.stages.context.RunContext` and reports through its
:class:`~flagperf.progress.Console`; none prints, and none decides a status (``flagperf.results.interpret`` does).
"""
