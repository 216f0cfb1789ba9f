"""Parsers fetch nothing unless allowed (SSRF), and XML DTDs cannot blow up
(entity expansion). A real HTTP listener on 127.0.0.1 records every request:
for refused inputs it must never be contacted."""

from __future__ import annotations

import json
import socket
import time

import pytest

from engine.errors import LoadError
from engine.kv import loader
from tests.support.http_listener import CTX, closed_port


def jsonld_bodies(url: str) -> dict[str, dict]:
    node = {"@id": "http://ex.org/a", "name": "A"}
    return {
        "string": {"@context": url + "/s", **node},
        "array": {"@context": [{"x": "http://ex.org/x"}, url + "/a"], **node},
        "import": {"@context": {"@version": 1.1, "@import": url + "/i"}, **node},
        "scoped": {"@context": {"@version": 1.1, "knows": {"@id": "http://ex.org/knows", "@context": url + "/n"}},
                   "@id": "http://ex.org/a", "knows": {"@id": "http://ex.org/b", "name": "B"}},
        "nested_node": {"@context": {"x": "http://ex.org/x"}, "@id": "http://ex.org/a",
                        "x": {"@context": url + "/e", "@id": "http://ex.org/b", "name": "B"}},
        "graph": {"@graph": [{"@context": url + "/g", **node}]},
        "relative": {"@context": "ctx.jsonld", **node},
    }


@pytest.mark.parametrize("kind", list(jsonld_bodies("http://x")))
def test_remote_jsonld_context_refused(listener, kind):
    body = json.dumps(jsonld_bodies(listener.url)[kind]).encode()
    with pytest.raises(LoadError) as ei:
        loader.parse_to_keys(body, "jsonld", base=listener.url + "/store")
    msg = str(ei.value)
    assert "--allow-load" in msg and "context" in msg
    assert listener.hits == []


def test_file_context_refused_for_payloads(tmp_path, listener):
    ctx = tmp_path / "ctx.jsonld"
    ctx.write_text(json.dumps(CTX))
    body = json.dumps({"@context": ctx.as_uri(), "@id": "http://ex.org/a", "name": "A"}).encode()
    with pytest.raises(LoadError, match="--allow-load"):
        loader.parse_to_keys(body, "jsonld")


def test_remote_context_fetched_when_allowed(listener):
    body = json.dumps(jsonld_bodies(listener.url)["string"]).encode()
    pk = loader.parse_to_keys(body, "jsonld", allow_fetch=True)
    assert pk.p.to_pylist() == ["<http://ex.org/name>"]
    assert listener.hits == ["/s"]


def test_allowed_fetch_failure_says_only_could_not_load(listener):
    url = f"http://127.0.0.1:{closed_port()}/ctx"
    body = json.dumps({"@context": url, "@id": "http://ex.org/a", "name": "A"}).encode()
    with pytest.raises(LoadError) as ei:
        loader.parse_to_keys(body, "jsonld", allow_fetch=True)
    assert ei.value.message == f"could not load context <{url}>"


def test_operator_file_may_use_a_context_file(tmp_path):
    (tmp_path / "ctx.jsonld").write_text(json.dumps(CTX))
    data = tmp_path / "d.jsonld"
    data.write_text(json.dumps({"@context": "ctx.jsonld", "@id": "http://ex.org/a", "name": "A"}))
    pk = loader.parse_to_keys(str(data), "jsonld", base=data.as_uri())
    assert pk.p.to_pylist() == ["<http://ex.org/name>"]


def test_audit_hook_blocks_the_network_during_an_untrusted_parse(listener):
    loader._install_audit_hook()
    port = listener.srv.server_address[1]
    loader._fetch_state.deny = []
    try:
        with pytest.raises(loader._FetchRefused):
            socket.create_connection(("127.0.0.1", port), timeout=5)
    finally:
        loader._fetch_state.deny = None
    assert listener.hits == []
    socket.create_connection(("127.0.0.1", port), timeout=5).close()  # other times: untouched


def test_turtle_base_does_not_fetch(listener):
    body = f"@base <{listener.url}/b/> . @prefix p: <{listener.url}/p#> . <a> p:q <c> .".encode()
    pk = loader.parse_to_keys(body, "ttl")
    assert pk.s.to_pylist() == [f"<{listener.url}/b/a>"]
    body = f"@base <{listener.url}/b/> . {{ <a> <q> <c> }}".encode()
    assert len(loader.parse_to_keys(body, "trig")) == 1
    assert listener.hits == []


# ------------------------------------------------------------------ XML
RDF_OPEN = (b'<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:ex="http://ex.org/">'
            b'<rdf:Description rdf:about="http://ex.org/a">')
RDF_CLOSE = b"</rdf:Description></rdf:RDF>"


def rdfxml(dtd: bytes, value: bytes) -> bytes:
    return b'<?xml version="1.0"?>\n<!DOCTYPE rdf:RDF [' + dtd + b"]>\n" + RDF_OPEN + b"<ex:p>" + value + \
        b"</ex:p>" + RDF_CLOSE


def billion_laughs(levels: int = 9, fan: int = 10) -> bytes:
    dtd = b'<!ENTITY lol0 "lol">'
    for i in range(1, levels + 1):
        dtd += b'<!ENTITY lol%d "%s">' % (i, (b"&lol%d;" % (i - 1)) * fan)
    return rdfxml(dtd, b"&lol%d;" % levels)


def test_billion_laughs_refused_fast():
    body = billion_laughs()
    assert len(body) < 2000
    t0 = time.process_time()
    with pytest.raises(LoadError, match="nested entities"):
        loader.parse_to_keys(body, "xml")
    assert time.process_time() - t0 < 2.0  # milliseconds in practice; was about a minute


def test_billion_laughs_in_an_attribute_refused():
    dtd = b'<!ENTITY a "xxxxxxxxxx"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
    body = b'<?xml version="1.0"?><!DOCTYPE rdf:RDF [' + dtd + b"]>" + RDF_OPEN.replace(
        b'rdf:about="http://ex.org/a"', b'rdf:about="http://ex.org/&b;"') + RDF_CLOSE
    with pytest.raises(LoadError, match="nested entities"):
        loader.parse_to_keys(body, "xml")


@pytest.mark.parametrize("size,refs", [(100_000, 2_000), (10_000, 50_000), (1_000_000, 5)])
def test_quadratic_blowup_refused(size, refs):
    body = rdfxml(b'<!ENTITY big "' + b"x" * size + b'">', b"&big;" * refs)
    t0 = time.process_time()
    with pytest.raises(LoadError, match="could expand"):
        loader.parse_to_keys(body, "xml")
    assert time.process_time() - t0 < 2.0


def test_quadratic_blowup_in_attribute_default_refused():
    dtd = b'<!ENTITY big "' + b"x" * 1000 + b'"><!ATTLIST rdf:Description ex:q CDATA "&big;&big;&big;">'
    with pytest.raises(LoadError, match="attribute default"):
        loader.parse_to_keys(rdfxml(dtd, b"v"), "xml")


@pytest.mark.parametrize("dtd", [
    b'<!ENTITY ext SYSTEM "{url}/ent">',
    b'<!ENTITY ext PUBLIC "-//x//y" "{url}/ent">',
    b'<!ENTITY % pe SYSTEM "{url}/pe"> %pe;',
    b'<!ENTITY % pe "<!ENTITY x \'y\'>"> %pe;',
    b'<!NOTATION n SYSTEM "{url}/n"><!ENTITY u SYSTEM "{url}/u" NDATA n>',
])
def test_external_and_parameter_entities_refused(listener, dtd):
    body = rdfxml(dtd.replace(b"{url}", listener.url.encode()), b"&ext;" if b"ext" in dtd else b"v")
    with pytest.raises(LoadError, match="DTD refused"):
        loader.parse_to_keys(body, "xml")
    assert listener.hits == []


def test_external_dtd_refused(listener):
    body = b'<?xml version="1.0"?><!DOCTYPE rdf:RDF SYSTEM "' + listener.url.encode() + b'/dtd">' + RDF_OPEN + \
        RDF_CLOSE
    with pytest.raises(LoadError, match="external DTD"):
        loader.parse_to_keys(body, "xml")
    assert listener.hits == []


def test_plain_entities_still_load():
    # the OWL-file idiom: namespace abbreviations as internal entities
    dtd = b'<!ENTITY ex "http://ex.org/"><!ENTITY xsd "http://www.w3.org/2001/XMLSchema#">'
    body = b'<?xml version="1.0"?><!DOCTYPE rdf:RDF [' + dtd + b"]>" + RDF_OPEN.replace(
        b'rdf:about="http://ex.org/a"', b'rdf:about="&ex;b"') + \
        b'<ex:p rdf:datatype="&xsd;integer">7</ex:p>' + RDF_CLOSE
    pk = loader.parse_to_keys(body, "xml")
    assert pk.s.to_pylist() == ["<http://ex.org/b>"]
    assert pk.o.to_pylist() == ['"7"^^<http://www.w3.org/2001/XMLSchema#integer>']


def test_utf16_xml_with_entities_is_checked():
    body = billion_laughs().decode().replace('<?xml version="1.0"?>', "").encode("utf-16")
    with pytest.raises(LoadError, match="nested entities"):
        loader.parse_to_keys(body, "xml")
    small = rdfxml(b'<!ENTITY big "' + b"x" * 100_000 + b'">', b"&big;" * 500).decode()
    with pytest.raises(LoadError, match="could expand"):
        loader.parse_to_keys(small.replace('<?xml version="1.0"?>', "").encode("utf-16"), "xml")


def test_jsonld_top_level_string_is_not_a_url(listener):
    with pytest.raises(LoadError, match="JSON object or array"):
        loader.parse_to_keys(json.dumps(listener.url + "/doc").encode(), "jsonld")
    assert listener.hits == []
