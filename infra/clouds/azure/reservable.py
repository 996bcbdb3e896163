"""Which Azure GPU VM sizes a capacity reservation can hold, by series: Microsoft's table, as data.

"On-demand capacity reservation", Limitations and restrictions (learn.microsoft.com/azure/
virtual-machines/capacity-reservation-overview; MicrosoftDocs/azure-compute-docs
articles/virtual-machines/capacity-reservation-overview.md, ms.date 02/17/2026, read 2026-11):
the GPU-accelerated series it supports ("Reserved capacity for these VM series supports only
multi-zone high availability. Virtual Machine Scale Sets with a fault domain availability construct
is not supported") and those it does not ("Support for other VM series isn't currently available":
ND-series, NCads H100 v5-series, Hb-series, Hc-series). For one size in one region the authority
is its Resource SKU's capability ``CapacityReservationSupported``; this table is what `validate`
can say without asking. Patterns match the size's name without ``Standard_``, case aside.
"""

from __future__ import annotations

import re

SOURCE = "Microsoft Learn, capacity reservation overview, Limitations and restrictions (ms.date 02/17/2026)"

RESERVABLE = (  # (the series as Microsoft names it, its sizes)
    ("NC-series v3", r"nc\d+r?s_v3"),
    ("NCasT4_v3", r"nc\d+as_t4_v3"),
    ("NCADSA10_v4", r"nc\d+ads_a10_v4"),
    ("NC_A100_v4", r"nc\d+ads_a100_v4"),
    ("NV-series v3 and newer", r"nv\d+(s_v3|as_v4)"),
    ("NVadsA10_v5", r"nv\d+adm?s_a10_v5"),
    ("NVads V710 v5", r"nv\d+ads_v710_v5"),
    ("NGads V620_v1", r"ng\d+ads_v620_v1"),
)
NOT_RESERVABLE = (
    ("ND-series", r"nd.*"),
    ("NCads H100 v5-series", r"nc\d+adi?s_h100_v5"),
    ("Hb-series", r"hb.*"),
    ("Hc-series", r"hc.*"),
)


def series(size: str) -> tuple[str, bool] | None:
    """The size's series and whether Azure reserves capacity of it; None for a series the table lacks."""
    name = size.lower().removeprefix("standard_")
    for label, pattern in RESERVABLE:
        if re.fullmatch(pattern, name):
            return label, True
    for label, pattern in NOT_RESERVABLE:
        if re.fullmatch(pattern, name):
            return label, False
    return None
