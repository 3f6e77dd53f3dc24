#!/usr/bin/env python3
"""bench/suite/validate.py: check the suite's JSON lines against schema.json.

    bench/suite/validate.py FILE.jsonl...        exit 0 if every line is valid
    bench/suite/validate.py --schema S FILE...   another schema

Implements the subset of JSON Schema (2020-12) that schema.json uses:
type (one or a list), enum, const, properties, required,
additionalProperties (false or a schema), items, minimum, minLength,
pattern, oneOf, $ref to "#/..." — keywords for objects, arrays, strings
and numbers apply only to instances of that kind, as in the standard.
It then checks what a schema cannot say about a result record: the
statistics are ordered (min <= median, avg, p99 <= max), stats.n matches
the samples kept, and the record's numbers are finite.

Python 3 standard library only; also used as a module by bench/suite/run
(validate_line, Validator).
"""

import json
import math
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA_PATH = os.path.join(HERE, "schema.json")

TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}

KNOWN = {"$schema", "$id", "$defs", "title", "description", "type", "enum", "const",
         "properties", "required", "additionalProperties", "items", "minimum", "minLength",
         "pattern", "oneOf", "$ref"}


class Validator:
    def __init__(self, schema):
        self.root = schema
        self._check_keywords(schema, "#")

    def _check_keywords(self, node, where):
        """Refuse a schema using keywords this subset does not implement."""
        if isinstance(node, dict):
            unknown = set(node) - KNOWN
            if unknown and not where.endswith(("/properties", "/$defs")):
                raise ValueError("%s: unsupported schema keyword(s) %s" % (where, sorted(unknown)))
            for key, value in node.items():
                self._check_keywords(value, where + "/" + key)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                self._check_keywords(value, "%s/%d" % (where, i))

    def resolve(self, ref):
        if not ref.startswith("#/"):
            raise ValueError("only local $ref are supported: %s" % ref)
        node = self.root
        for part in ref[2:].split("/"):
            node = node[part]
        return node

    def errors(self, value, schema=None, path="$"):
        """All the ways value fails schema, as 'path: message' strings."""
        schema = self.root if schema is None else schema
        out = []
        if "$ref" in schema:
            out += self.errors(value, self.resolve(schema["$ref"]), path)
        if "oneOf" in schema:
            results = [self.errors(value, sub, path) for sub in schema["oneOf"]]
            passing = sum(1 for r in results if not r)
            if passing != 1:
                if passing == 0:
                    best = min(results, key=len)
                    out.append("%s: matches none of oneOf; closest: %s" % (path, "; ".join(best[:3])))
                else:
                    out.append("%s: matches %d of oneOf, expected exactly 1" % (path, passing))
        if "type" in schema:
            kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            if not any(TYPES[k](value) for k in kinds):
                return out + ["%s: %s is not of type %s" % (path, _short(value), "/".join(kinds))]
        if "const" in schema and value != schema["const"]:
            out.append("%s: %s is not %s" % (path, _short(value), _short(schema["const"])))
        if "enum" in schema and value not in schema["enum"]:
            out.append("%s: %s is not one of %s" % (path, _short(value), schema["enum"]))
        if TYPES["number"](value) and "minimum" in schema and value < schema["minimum"]:
            out.append("%s: %s is below the minimum %s" % (path, value, schema["minimum"]))
        if isinstance(value, str):
            if len(value) < schema.get("minLength", 0):
                out.append("%s: string shorter than %d" % (path, schema["minLength"]))
            if "pattern" in schema and not re.search(schema["pattern"], value):
                out.append("%s: %s does not match %s" % (path, _short(value), schema["pattern"]))
        if isinstance(value, list) and "items" in schema:
            for i, item in enumerate(value):
                out += self.errors(item, schema["items"], "%s[%d]" % (path, i))
        if isinstance(value, dict):
            for key in schema.get("required", []):
                if key not in value:
                    out.append("%s: missing required property %r" % (path, key))
            props = schema.get("properties", {})
            extra = schema.get("additionalProperties", True)
            for key, item in value.items():
                if key in props:
                    out += self.errors(item, props[key], "%s.%s" % (path, key))
                elif extra is False:
                    out.append("%s: unexpected property %r" % (path, key))
                elif isinstance(extra, dict):
                    out += self.errors(item, extra, "%s.%s" % (path, key))
        return out


def _short(value):
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def semantic_errors(record):
    """What the schema cannot say: ordered statistics, samples count, finite numbers."""
    out = []
    if record.get("type") != "result":
        return out
    s = record.get("stats") or {}
    if all(isinstance(s.get(k), (int, float)) for k in ("min", "avg", "max", "median", "p99")):
        eps = 1e-9 + 1e-6 * abs(s["max"])
        if not (s["min"] - eps <= s["median"] <= s["max"] + eps
                and s["min"] - eps <= s["avg"] <= s["max"] + eps
                and s["min"] - eps <= s["p99"] <= s["max"] + eps):
            out.append("$.stats: not ordered (min <= median, avg, p99 <= max): %s" % s)
        if s.get("stddev", 0) is not None and s.get("stddev", 0) < 0:
            out.append("$.stats.stddev is negative")
    elif record.get("stats"):
        out.append("$.stats: a statistic is null (not finite)")
    samples = record.get("samples")
    if samples is not None and len(samples) != s.get("n"):
        out.append("$.samples: %d samples but stats.n = %s" % (len(samples), s.get("n")))
    if samples and any(x is None or not math.isfinite(x) for x in samples):
        out.append("$.samples: a sample is not finite")
    return out


_default = None


def default_validator():
    global _default
    if _default is None:
        with open(SCHEMA_PATH) as f:
            _default = Validator(json.load(f))
    return _default


def validate_line(line, validator=None):
    """Parse and check one JSON line: returns (record or None, [errors])."""
    validator = validator or default_validator()
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        return None, ["not JSON: %s" % e]
    errs = validator.errors(record)
    if not errs:
        errs = semantic_errors(record)
    return record, errs


def main(argv):
    import argparse

    p = argparse.ArgumentParser(description="Validate benchmark JSON lines against schema.json.")
    p.add_argument("--schema", default=SCHEMA_PATH, help="schema file (default: schema.json here)")
    p.add_argument("--quiet", action="store_true", help="print only errors")
    p.add_argument("files", nargs="+", help="JSON-lines files")
    args = p.parse_args(argv)
    with open(args.schema) as f:
        validator = Validator(json.load(f))
    bad = total = 0
    for name in args.files:
        with open(name) as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                total += 1
                _, errs = validate_line(line, validator)
                if errs:
                    bad += 1
                    for e in errs[:5]:
                        print("%s:%d: %s" % (name, number, e))
    if not args.quiet or bad:
        print("%d of %d records valid in %d file(s)" % (total - bad, total, len(args.files)))
    if total == 0:
        print("no records found")
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
