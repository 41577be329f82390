"""Validates JSON against docs/dcp-plan.schema.json with the standard library only.

Usage: python3 tests/json_schema.py SCHEMA FILE...  (each FILE holds one JSON document; exit 1
naming the first path that breaks the schema). It understands the keywords that schema uses
($ref to #/$defs, oneOf, type, enum, properties, required, additionalProperties, items,
minimum, maximum, exclusiveMinimum) and refuses any other, so a constraint added to the schema
is never ignored silently.
"""
import json
import sys

TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "number": (int, float),
         "integer": int}
ANNOTATIONS = {"$schema", "$id", "title", "description", "$defs"}
KEYWORDS = ANNOTATIONS | {"$ref", "oneOf", "type", "enum", "properties", "required",
                          "additionalProperties", "items", "minimum", "maximum",
                          "exclusiveMinimum"}


class SchemaError(Exception):
    pass


def _is_type(value, name):
    if isinstance(value, bool) and name != "boolean":
        return False  # JSON's true is not a number
    return isinstance(value, TYPES[name])


def _check_object(value, schema, root, path):
    for key in schema.get("required", []):
        if key not in value:
            raise SchemaError(f"{path}: missing key {key!r}")
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in properties:
            validate(item, properties[key], root, f"{path}.{key}")
        elif extra is False:
            raise SchemaError(f"{path}: key {key!r} is not in the schema")
        elif isinstance(extra, dict):
            validate(item, extra, root, f"{path}.{key}")


def _check_number(value, schema, path):
    if "minimum" in schema and value < schema["minimum"]:
        raise SchemaError(f"{path}: {value} < minimum {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        raise SchemaError(f"{path}: {value} > maximum {schema['maximum']}")
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        raise SchemaError(f"{path}: {value} <= exclusiveMinimum {schema['exclusiveMinimum']}")


def validate(value, schema, root, path="$"):
    unknown = set(schema) - KEYWORDS
    if unknown:
        raise SchemaError(f"schema at {path} uses unsupported keywords {sorted(unknown)}")
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return validate(value, root["$defs"][name], root, path)
    if "oneOf" in schema:
        passing = 0
        for option in schema["oneOf"]:
            try:
                validate(value, option, root, path)
                passing += 1
            except SchemaError:
                pass
        if passing != 1:
            raise SchemaError(f"{path}: matches {passing} of the oneOf schemas, not 1")
        return None
    if "type" in schema and not _is_type(value, schema["type"]):
        raise SchemaError(f"{path}: {type(value).__name__} is not {schema['type']}")
    if "enum" in schema and value not in schema["enum"]:
        raise SchemaError(f"{path}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, dict):
        _check_object(value, schema, root, path)
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            validate(item, schema["items"], root, f"{path}[{i}]")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_number(value, schema, path)
    return None


def main(argv):
    with open(argv[0]) as f:
        schema = json.load(f)
    for name in argv[1:]:
        with open(name) as f:
            document = json.load(f)
        try:
            validate(document, schema, schema)
        except SchemaError as failure:
            print(f"{name}: {failure}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
