"""Built-in demo: a small city with districts, places and sensors.

``jindou serve --demo`` loads :data:`DEMO_DATA` into the default graph so a new
user can query at once; :data:`DEMO_QUERIES` are examples for the docs and
the dashboard. (The demo stream and the registered demo query come with the
streaming work.)
"""

from __future__ import annotations

from pathlib import Path

DEMO_DIR = Path(__file__).resolve().parent / "demo_data"
DEMO_DATA = DEMO_DIR / "city.ttl"
DEMO_NS = "http://jindou.example/city/"

PREFIXES = f"""PREFIX city: <{DEMO_NS}>
PREFIX rdfs: <http://www.w3.org/2000/01/rdf-schema#>
PREFIX sosa: <http://www.w3.org/ns/sosa/>
PREFIX schema: <http://schema.org/>
"""

DEMO_QUERIES = {
    "sensors per district": PREFIXES + """SELECT ?district (COUNT(?sensor) AS ?sensors) WHERE {
  ?sensor sosa:isHostedBy ?place .
  ?place schema:containedInPlace ?d .
  ?d rdfs:label ?district .
} GROUP BY ?district ORDER BY DESC(?sensors)""",
    "temperature sensors": PREFIXES + """SELECT ?sensor ?place WHERE {
  ?sensor a city:TemperatureSensor ; sosa:isHostedBy ?p .
  ?p rdfs:label ?place .
} ORDER BY ?sensor""",
    "latest readings": PREFIXES + """SELECT ?sensor ?value ?time WHERE {
  ?obs sosa:madeBySensor ?sensor ; sosa:hasSimpleResult ?value ; sosa:resultTime ?time .
} ORDER BY DESC(?time) LIMIT 10""",
}


def demo_triples_file() -> Path:
    return DEMO_DATA


def load_demo(db, graph: str | None = None) -> int:
    """Load the demo data into ``db``; returns the number of triples loaded (or -1 if unknown)."""
    report = db.load_file(str(DEMO_DATA), graph=graph, format="text/turtle")
    n = getattr(report, "triples", None)
    if n is None and isinstance(report, dict):
        n = report.get("triples")
    return int(n) if n is not None else -1
