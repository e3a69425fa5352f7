"""Every example in the HTTP API's document is valid against the schema it illustrates.

Run by scripts/api-fuzz on docs/openapi.json: the examples of the component schemas (and of their
properties), of each operation's parameters, request bodies and responses, each validated with
JSON Schema 2020-12 (OpenAPI 3.1's dialect) against its schema, references resolved in the
document. schemathesis sends the request examples to the server, and a test
(crates/floodgate-server/tests/server/openapi.rs) checks that each is accepted; this checks that
none says what its schema refuses.

Usage: examples_check.py docs/openapi.json
"""

import json
import sys

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012


def escape(token):
    return token.replace("~", "~0").replace("/", "~1")


def main(path):
    document = json.load(open(path))
    registry = Registry().with_resource("urn:document", Resource.from_contents(document, DRAFT202012))

    def invalid(pointer, example):
        validator = Draft202012Validator({"$ref": "urn:document#" + pointer}, registry=registry)
        return [error.message for error in validator.iter_errors(example)]

    checked, failures = 0, []

    def check(pointer, example):
        nonlocal checked
        checked += 1
        for message in invalid(pointer, example)[:1]:
            failures.append(f"{pointer}: {json.dumps(example)[:120]}: {message[:300]}")

    # The schemas' own examples, wherever they sit in a schema.
    def walk(node, pointer):
        if isinstance(node, dict):
            if isinstance(node.get("examples"), list) and any(k in node for k in ("type", "$ref", "properties", "oneOf", "enum")):
                for example in node["examples"]:
                    check(pointer, example)
            for key, value in node.items():
                walk(value, f"{pointer}/{escape(key)}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{pointer}/{index}")

    walk(document["components"]["schemas"], "/components/schemas")
    for route, operations in document["paths"].items():
        for method, operation in operations.items():
            base = f"/paths/{escape(route)}/{method}"
            for index, parameter in enumerate(operation.get("parameters", [])):
                if "example" in parameter:
                    check(f"{base}/parameters/{index}/schema", parameter["example"])
            contents = [
                (f"{base}/requestBody/content/{escape(kind)}", content)
                for kind, content in operation.get("requestBody", {}).get("content", {}).items()
            ]
            for status, response in operation.get("responses", {}).items():
                contents += [
                    (f"{base}/responses/{status}/content/{escape(kind)}", content)
                    for kind, content in response.get("content", {}).items()
                ]
            for pointer, content in contents:
                if "schema" not in content:
                    continue
                examples = [content["example"]] if "example" in content else []
                examples += [named["value"] for named in content.get("examples", {}).values() if "value" in named]
                for example in examples:
                    check(f"{pointer}/schema", example)

    for failure in failures:
        print(f"examples_check: {failure}", file=sys.stderr)
    if failures:
        sys.exit(1)
    print(f"{path}: {checked} examples, each valid against its schema")


if __name__ == "__main__":
    main(sys.argv[1])
