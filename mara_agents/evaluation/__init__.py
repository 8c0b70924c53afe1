"""The evaluation harness (neither torch nor ray): spec strings, episodes, intervals, reports.

* :mod:`~mara_agents.evaluation.registry`: what a spec string names, checked up front;
* :mod:`~mara_agents.evaluation.runner`: every spec on the same episodes;
* :mod:`~mara_agents.evaluation.stats`: the results table, t-intervals, paired differences;
* :mod:`~mara_agents.evaluation.report`: ``summary.md``, plots, TensorBoard scalars;
* :mod:`~mara_agents.evaluation.references`: what a policy trained with another library
  (``examples/``) is compared with on the harness's episodes.
"""
