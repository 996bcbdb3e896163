"""`gpufleet report`: the cost comparison an ops team puts in front of its budget owner.

One module per job: ``frontier`` (the Pareto frontier of cost vs time and the three picks),
``ownership`` (owning a rack vs renting: cost per GPU-hour, break-even utilisation, cost per
month), ``model`` (the report's data, built from :func:`gpufleet.compare.compare` reports),
``clusters`` (running clusters' cost so far, from `status`), ``charts`` (matplotlib, imported
only here and only when a chart is drawn), ``html`` and ``markdown`` (the two renderers) and
``files`` (writing them all or nothing).
"""
