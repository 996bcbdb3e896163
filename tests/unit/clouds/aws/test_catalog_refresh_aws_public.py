"""`gpufleet catalog refresh --public -p aws`: AWS's unsigned bulk offer files, with no credentials.
No AWS endpoint can be reached from here: a local HTTP server serves a region index and CSV offer
files in the documented format (five preamble lines, the header, a row per price dimension; see
clouds/aws/bulk_prices.py), made around the catalog's own instance types and regions, with the
rows a real file carries that must not be taken (Windows, dedicated tenancy, reserved terms,
capacity-reservation rows, a Local Zone, types the catalog does not list)."""

import csv
import http.server
import io
import json
import threading

import pytest

from conftest import cli

HEADER = ["SKU", "OfferTermCode", "RateCode", "TermType", "PriceDescription", "EffectiveDate", "StartingRange",
          "EndingRange", "Unit", "PricePerUnit", "Currency", "Product Family", "Location", "Location Type",
          "Instance Type", "Tenancy", "Operating System", "License Model", "Pre Installed S/W", "CapacityStatus",
          "Region Code"]


def offer_file(region: str, prices: dict[str, float], preamble: bool = True) -> bytes:
    buf = io.StringIO()
    if preamble:
        for k, v in (("FormatVersion", "v1.0"), ("Disclaimer", "test"), ("Publication Date", "2026-11-20T00:00:00Z"),
                     ("Version", "20261120000000"), ("OfferCode", "AmazonEC2")):
            buf.write(f'"{k}","{v}"\r\n')
    w = csv.writer(buf, quoting=csv.QUOTE_ALL)
    w.writerow(HEADER)

    def row(sku, itype, usd, **over):
        base = {"SKU": sku, "OfferTermCode": "JRTCKXETXF", "RateCode": f"{sku}.JRTCKXETXF.6YS6EN2CT7",
                "TermType": "OnDemand", "PriceDescription": f"${usd} per On Demand Linux {itype} Instance Hour",
                "EffectiveDate": "2026-11-01", "StartingRange": "0", "EndingRange": "Inf", "Unit": "Hrs",
                "PricePerUnit": f"{usd:.10f}", "Currency": "USD",
                "Product Family": "Compute Instance", "Location": region, "Location Type": "AWS Region",
                "Instance Type": itype, "Tenancy": "Shared", "Operating System": "Linux",
                "License Model": "No License required", "Pre Installed S/W": "NA", "CapacityStatus": "Used",
                "Region Code": region}
        w.writerow([{**base, **over}[h] for h in HEADER])

    for i, (itype, usd) in enumerate(sorted(prices.items())):
        row(f"SKU{i}L", itype, usd)
        row(f"SKU{i}W", itype, usd * 2, **{"Operating System": "Windows"})
        row(f"SKU{i}D", itype, usd * 3, Tenancy="Dedicated")
        row(f"SKU{i}R", itype, usd / 2, TermType="Reserved")
        row(f"SKU{i}C", itype, 0.0, CapacityStatus="AllocatedCapacityReservation")
        row(f"SKU{i}Z", itype, usd * 1.2, **{"Location Type": "AWS Local Zone"})
    row("SKUM5", "m5.large", 0.096)
    return buf.getvalue().encode()


@pytest.fixture
def bulk(cat, monkeypatch, tmp_path):
    """Serves the price list; ``files[region]`` may be replaced by a test. No AWS credentials at all."""
    files = {}
    for region in cat.regions["aws"]:
        prices = {o.instance.name: o.usd_per_hour for o in cat.offers()
                  if o.provider == "aws" and o.region == region and o.market == "ondemand"}
        if prices:
            files[region] = offer_file(region, prices)
    index = {"formatVersion": "v1.0", "regions": {r: {"regionCode": r, "currentVersionUrl":
                                                      f"/offers/v1.0/aws/AmazonEC2/20261120000000/{r}/index.json"}
                                                  for r in files}}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.endswith("region_index.json"):
                body = json.dumps(index).encode()
            elif self.path.endswith("/index.csv"):
                body = files[self.path.split("/")[-2]]
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("GPUFLEET_AWS_PRICE_LIST_URL", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setenv("GPUFLEET_PRICES", str(tmp_path / "prices.json"))
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    yield files
    server.shutdown()


def _stored(tmp_path):
    return json.loads((tmp_path / "prices.json").read_text())


def test_a_public_refresh_takes_only_linux_shared_on_demand_rows_without_credentials(bulk, cat, tmp_path):
    r = cli("catalog", "refresh", "-p", "aws")  # the signed API: no credentials, exit 1, nothing written
    assert r.exit_code == 1 and "no credentials found" in r.output
    r = cli("--json", "catalog", "refresh", "-p", "aws", "--public")
    assert r.exit_code == 0, r.output
    rows = _stored(tmp_path)["prices"]
    assert {x["api"] for x in rows if x["market"] == "ondemand"} == {"aws-price-list-bulk"}
    # the public list has no spot: the catalog's spot rows are kept, each with its own date
    spot = {(x["item"], x["region"]): x for x in rows if x["market"] == "spot"}
    before = {(o.instance.name, o.region): o for o in cat.offers() if o.provider == "aws" and o.market == "spot"}
    assert set(spot) == set(before) and {x["api"] for x in spot.values()} == {"aws-spot-kept"}
    assert spot[("p5.48xlarge", "us-east-1")]["fetched_at"].startswith(before[("p5.48xlarge", "us-east-1")].as_of)
    got = {(x["item"], x["region"]): x for x in rows if x["market"] == "ondemand"}
    shipped = cat.offer("aws", "us-east-1", "p5.48xlarge", "ondemand").usd_per_hour
    assert got[("p5.48xlarge", "us-east-1")]["usd_per_hour"] == pytest.approx(shipped)  # not Windows, dedicated...
    assert got[("p5.48xlarge", "us-east-1")]["sku_id"].endswith("L")
    assert not [k for k in got if k[0] == "m5.large"]  # not a catalog type
    assert len(got) == sum(1 for o in cat.offers() if o.provider == "aws" and o.market == "ondemand")


def test_an_offer_file_not_in_the_documented_format_keeps_the_previous_prices(bulk, tmp_path):
    bulk["us-east-1"] = offer_file("us-east-1", {"p5.48xlarge": 55.04}, preamble=False)
    r = cli("catalog", "refresh", "-p", "aws", "--public")
    assert r.exit_code == 1 and "not the documented CSV" in r.output and "FormatVersion" in r.output, r.output
    assert not (tmp_path / "prices.json").exists()
