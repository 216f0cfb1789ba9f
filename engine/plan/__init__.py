"""The plan stage: parse (``engine.sparql.parser``) -> plan (here) -> execute (``engine.exec``).

* :mod:`engine.plan.rewrite` -- algebra rewrites done once per parsed query (joins of
  BGPs merged, joins that explore from the left rows, filter placement) into the
  plan operators of :mod:`engine.plan.nodes`;
* :mod:`engine.plan.order` -- the cost model and the BGP step order, chosen per
  snapshot from its statistics (cached per snapshot by the executor's plan cache);
* :mod:`engine.plan.planner` -- the plan object of a query and the fast-path choice;
* :mod:`engine.plan.explain` -- the plan as JSON, optionally with the actual rows and
  time of every operator (``explain=analyze``).
"""
