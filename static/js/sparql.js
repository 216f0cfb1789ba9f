// SPARQL / C-SPARQL text helpers: a tokenizer for highlighting, the prefixes a
// query declares, the kind of operation a text is, and IRI shortening.

export const KNOWN_PREFIXES = {
  rdf: "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
  rdfs: "http://www.w3.org/2000/01/rdf-schema#",
  xsd: "http://www.w3.org/2001/XMLSchema#",
  owl: "http://www.w3.org/2002/07/owl#",
  sosa: "http://www.w3.org/ns/sosa/",
  ssn: "http://www.w3.org/ns/ssn/",
  schema: "http://schema.org/",
  geo: "http://www.w3.org/2003/01/geo/wgs84_pos#",
  city: "http://jindou.example/city/",
  foaf: "http://xmlns.com/foaf/0.1/",
  dc: "http://purl.org/dc/elements/1.1/",
  dcterms: "http://purl.org/dc/terms/",
  skos: "http://www.w3.org/2004/02/skos/core#",
  prov: "http://www.w3.org/ns/prov#",
  qudt: "http://qudt.org/schema/qudt/",
  unit: "http://qudt.org/vocab/unit/",
  time: "http://www.w3.org/2006/time#",
  void: "http://rdfs.org/ns/void#",
  sd: "http://www.w3.org/ns/sparql-service-description#",
  ex: "http://example.org/",
};

const KEYWORDS = new Set(`
  SELECT CONSTRUCT DESCRIBE ASK WHERE FROM NAMED PREFIX BASE DISTINCT REDUCED AS ORDER BY ASC DESC
  LIMIT OFFSET GROUP HAVING OPTIONAL UNION MINUS FILTER BIND VALUES GRAPH SERVICE SILENT NOT EXISTS IN
  UNDEF A INSERT DELETE DATA LOAD CLEAR DROP CREATE ADD MOVE COPY TO INTO WITH USING DEFAULT ALL
  REGISTER QUERY STREAM RANGE STEP TUMBLING TRIPLES RSTREAM ISTREAM DSTREAM TRUE FALSE
`.trim().split(/\s+/));

const FUNCTIONS = new Set(`
  STR LANG LANGMATCHES DATATYPE BOUND IRI URI BNODE RAND ABS CEIL FLOOR ROUND CONCAT STRLEN UCASE LCASE
  ENCODE_FOR_URI CONTAINS STRSTARTS STRENDS STRBEFORE STRAFTER YEAR MONTH DAY HOURS MINUTES SECONDS
  TIMEZONE TZ NOW UUID STRUUID MD5 SHA1 SHA256 SHA384 SHA512 COALESCE IF STRLANG STRDT SAMETERM ISIRI
  ISURI ISBLANK ISLITERAL ISNUMERIC REGEX SUBSTR REPLACE COUNT SUM MIN MAX AVG SAMPLE GROUP_CONCAT SEPARATOR
`.trim().split(/\s+/));

// One regex with a named group per token kind, tried in order at each position.
const TOKEN_RE = new RegExp([
  String.raw`(?<ws>\s+)`,
  String.raw`(?<comment>#[^\n]*)`,
  String.raw`(?<iri><[^<>"{}|^\x60\\\s]*>)`,
  String.raw`(?<string>"""[\s\S]*?(?:"""|$)|'''[\s\S]*?(?:'''|$)|"(?:[^"\\\n]|\\.)*"?|'(?:[^'\\\n]|\\.)*'?)`,
  String.raw`(?<var>[?$][A-Za-z0-9_\u00C0-\uFFFF]+)`,
  String.raw`(?<lang>@[A-Za-z]+(?:-[A-Za-z0-9]+)*)`,
  String.raw`(?<duration>\b\d+(?:ms|s|m|h|d)\b)`,
  String.raw`(?<number>[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?))`,
  String.raw`(?<pname>(?:[A-Za-z\u00C0-\uFFFF][\w\u00C0-\uFFFF.-]*)?:(?:[\w\u00C0-\uFFFF%\\.:-]*[\w\u00C0-\uFFFF%:-])?)`,
  String.raw`(?<word>[A-Za-z_][A-Za-z0-9_]*)`,
  String.raw`(?<punct>\^\^|&&|\|\||!=|<=|>=|[{}()\[\].,;*+/!=<>|^-])`,
  String.raw`(?<other>.)`,
].join("|"), "gy");

/** Split text into [{kind, text, start}] covering every character. */
export function tokenize(text) {
  const out = [];
  TOKEN_RE.lastIndex = 0;
  let m;
  while (TOKEN_RE.lastIndex < text.length && (m = TOKEN_RE.exec(text)) !== null) {
    let kind = "other";
    for (const [k, v] of Object.entries(m.groups)) {
      if (v !== undefined) { kind = k; break; }
    }
    if (kind === "word") {
      const up = m[0].toUpperCase();
      if (KEYWORDS.has(up) || m[0] === "a") kind = "keyword";
      else if (FUNCTIONS.has(up)) kind = "function";
    }
    out.push({ kind, text: m[0], start: m.index });
  }
  return out;
}

/** The PREFIX declarations of a text: {name: iri}. */
export function declaredPrefixes(text) {
  const out = {};
  const re = /\bPREFIX\s+([A-Za-z\u00C0-\uFFFF][\w\u00C0-\uFFFF.-]*)?:\s*<([^>\s]*)>/gi;
  for (const m of stripComments(text).matchAll(re)) out[m[1] || ""] = m[2];
  return out;
}

function stripComments(text) {
  // Comments outside IRIs and strings: blank them, keep offsets.
  return tokenize(text).map((t) => (t.kind === "comment" ? " ".repeat(t.text.length) : t.text)).join("");
}

/**
 * What a text asks for: "register" (C-SPARQL REGISTER QUERY), "update"
 * (SPARQL Update), or the query form: "select", "construct", "describe", "ask".
 */
export function operationOf(text) {
  const words = tokenize(text).filter((t) => t.kind === "keyword" || t.kind === "word");
  let i = 0;
  // skip the prologue: PREFIX p: <iri> and BASE <iri> have no other words in them
  while (i < words.length && /^(PREFIX|BASE)$/i.test(words[i].text)) i++;
  const first = (words[i] && words[i].text.toUpperCase()) || "";
  if (first === "REGISTER") return "register";
  if (["SELECT", "CONSTRUCT", "DESCRIBE", "ASK"].includes(first)) return first.toLowerCase();
  if (["INSERT", "DELETE", "LOAD", "CLEAR", "DROP", "CREATE", "ADD", "MOVE", "COPY", "WITH"].includes(first)) {
    return "update";
  }
  return "select";
}

/** Name of a REGISTER QUERY text, or null. */
export function registeredName(text) {
  const m = stripComments(text).match(/\bREGISTER\s+(?:[RID]STREAM\s+)?QUERY\s+([A-Za-z0-9_.-]+)/i);
  return m ? m[1] : null;
}

/** Shortens IRIs with a prefix map (longest namespace first). */
export class Shortener {
  constructor(prefixes) {
    this.entries = Object.entries(prefixes).filter(([, ns]) => ns).sort((a, b) => b[1].length - a[1].length);
  }

  shorten(iri) {
    for (const [p, ns] of this.entries) {
      if (iri.startsWith(ns)) {
        const local = iri.slice(ns.length);
        if (/^[\w\u00C0-\uFFFF][\w\u00C0-\uFFFF.-]*$/.test(local) && !local.endsWith(".")) return `${p}:${local}`;
        if (local === "") return `${p}:`;
      }
    }
    return null;
  }
}

/** A term of SPARQL JSON results as N-Triples-like text. */
export function termText(t) {
  if (!t) return "";
  if (t.type === "uri") return `<${t.value}>`;
  if (t.type === "bnode") return `_:${t.value}`;
  let s = JSON.stringify(t.value);
  if (t["xml:lang"]) s += "@" + t["xml:lang"];
  else if (t.datatype && t.datatype !== "http://www.w3.org/2001/XMLSchema#string") s += `^^<${t.datatype}>`;
  return s;
}

const NUMERIC = new Set(["integer", "decimal", "double", "float", "int", "long", "short", "byte",
  "nonNegativeInteger", "positiveInteger", "negativeInteger", "nonPositiveInteger", "unsignedInt",
  "unsignedLong", "unsignedShort", "unsignedByte"].map((x) => "http://www.w3.org/2001/XMLSchema#" + x));

/** Compare two result terms the way a user expects a column to sort (numbers by value). */
export function compareTerms(a, b) {
  if (!a && !b) return 0;
  if (!a) return -1;
  if (!b) return 1;
  const rank = (t) => (t.type === "bnode" ? 0 : t.type === "uri" ? 1 : 2);
  if (rank(a) !== rank(b)) return rank(a) - rank(b);
  if (a.type === "literal" && NUMERIC.has(a.datatype) && NUMERIC.has(b.datatype)) {
    const d = Number(a.value) - Number(b.value);
    if (d !== 0 && !Number.isNaN(d)) return d;
  }
  return a.value < b.value ? -1 : a.value > b.value ? 1 : 0;
}

export function isNumericTerm(t) {
  return !!t && t.type === "literal" && NUMERIC.has(t.datatype);
}
