"""AWS EC2 on-demand prices from the public bulk price list: no credentials, no signing.

AWS publishes each service's offer files unsigned at ``pricing.us-east-1.amazonaws.com``
(docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/using-the-aws-price-list-bulk-api.html):
``/offers/v1.0/aws/AmazonEC2/current/region_index.json`` names each region's current file
(``regions.<code>.currentVersionUrl``, ``.../<version>/<region>/index.json``), and the same path
ending ``.csv`` is the CSV form: five preamble lines (``"FormatVersion"``, ``"Disclaimer"``,
``"Publication Date"``, ``"Version"``, ``"OfferCode"``), the header, then one row per price
dimension with columns by name (``TermType``, ``Unit``, ``PricePerUnit``, ``Currency``,
``Instance Type``, ``Operating System``, ``Tenancy``, ``Pre Installed S/W``, ``CapacityStatus``,
``Location Type``, ``Region Code``, ``SKU``). A region's file is hundreds of MB: it is streamed,
one row at a time, and only the catalog's instance types are kept, with the same terms the
signed Price List filters on (Linux, shared tenancy, no pre-installed software, capacity Used, an
AWS Region, hourly on-demand). Spot prices and instance facts need the signed APIs: the
catalog's spot rows are kept as they were, with their dates.
``GPUFLEET_AWS_PRICE_LIST_URL`` points it elsewhere (a mirror; the tests' local server).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import urllib.error
import urllib.request

from gpufleet.catalog.fetched import Fetched, FetchedPrice, FetchError, stamp
from gpufleet.clouds.aws.rules import FLAGSHIPS  # noqa: F401 - the refresh reads it here

API = "aws-price-list-bulk"
BASE = "https://pricing.us-east-1.amazonaws.com"
INDEX = "/offers/v1.0/aws/AmazonEC2/current/region_index.json"
PREAMBLE = ("FormatVersion", "Disclaimer", "Publication Date", "Version", "OfferCode")
KEEP = {"TermType": "OnDemand", "Unit": "Hrs", "Currency": "USD", "Operating System": "Linux", "Tenancy": "Shared",
        "Pre Installed S/W": "NA", "CapacityStatus": "Used", "Location Type": "AWS Region"}


def _base() -> str:
    return os.environ.get("GPUFLEET_AWS_PRICE_LIST_URL", BASE).rstrip("/")


def _open(path: str):
    try:
        return urllib.request.urlopen(_base() + path, timeout=120)  # noqa: S310 - https, or the user's own mirror
    except (urllib.error.URLError, OSError) as e:
        raise FetchError("aws", f"the public price list at {_base()}{path} could not be read ({e})",
                         "check the network or a proxy; the previous prices are kept") from None


def region_rows(stream, types: set[str], region: str, when: str) -> list[FetchedPrice]:
    """The on-demand rows of ``types`` in one region's CSV offer file (a binary stream)."""
    text = io.TextIOWrapper(stream, encoding="utf-8", newline="")
    for want in PREAMBLE:
        line = text.readline()
        if not line.startswith(f'"{want}"'):
            raise FetchError("aws", f"the {region} offer file is not the documented CSV (expected its {want!r} line, "
                             f"got {line[:60]!r})", "try again later; the previous prices are kept")
    out = []
    reader = csv.DictReader(text)
    missing = {"SKU", "PricePerUnit", "Instance Type", "Region Code", *KEEP} - set(reader.fieldnames or ())
    if missing:
        raise FetchError("aws", f"the {region} offer file has no column {', '.join(sorted(missing))}",
                         "the format changed: the previous prices are kept")
    for row in reader:
        if row["Instance Type"] not in types or any(row[k] != v for k, v in KEEP.items()):
            continue
        usd = float(row["PricePerUnit"])
        if usd > 0 and row["Region Code"] == region:
            out.append(FetchedPrice("aws", row["Instance Type"], region, "ondemand", usd, API, row["SKU"], when))
    return out


def fetch(instance_types: list[str], regions: list[str], *, now: dt.datetime | None = None, progress=None) -> Fetched:
    """On-demand prices of ``instance_types`` in ``regions`` from the public offer files, a region at a time."""
    when = stamp(now)
    with _open(INDEX) as f:
        try:
            index = json.load(f)["regions"]
        except (ValueError, KeyError) as e:
            raise FetchError("aws", f"the public price list's region index is not the documented JSON ({e})",
                             "try again later; the previous prices are kept") from None
    types, rows, notes = set(instance_types), [], []
    for i, region in enumerate(regions, 1):
        entry = index.get(region)
        if entry is None:
            notes.append(f"{region}: not in the public price list's region index")
            continue
        url = entry["currentVersionUrl"]
        with _open(url[: -len(".json")] + ".csv" if url.endswith(".json") else url) as f:
            rows += region_rows(f, types, region, when)
        if progress:
            progress(f"{i}/{len(regions)} (offer file of {region})")
    notes.append("the public bulk price list: on-demand prices only (spot prices and instance facts need "
                 "credentials for the signed APIs)")
    return Fetched(sorted(rows, key=lambda r: (r.item, r.region)), notes=notes)


CARRIED = "aws-spot-kept"  # the api of a spot row a public refresh keeps as it was


def for_catalog(cat, progress=None) -> Fetched:
    """On-demand prices of every AWS instance type and region the catalog has, without credentials;
    the catalog's spot rows are kept as they were (dated as before: the public list has no spot)."""
    types = sorted(n for (p, n) in cat.instances if p == "aws")
    got = fetch(types, sorted(cat.regions.get("aws", {})), progress=progress)
    kept = [FetchedPrice("aws", p.item, p.region, "spot", p.usd_per_hour, CARRIED, p.source[:200], _time(p.as_of))
            for p in cat.prices if p.provider == "aws" and p.market == "spot" and not p.quote]
    got.prices += kept
    got.notes.append(f"{len(kept)} spot prices kept as they were, each with its date")
    return got


def _time(as_of: str) -> str:
    """A catalog date (``2025-06``, ``2025-06-01`` or a fetch time) as the fetch time a stored row carries."""
    return {7: f"{as_of}-01T00:00:00Z", 10: f"{as_of}T00:00:00Z"}.get(len(as_of), as_of)
