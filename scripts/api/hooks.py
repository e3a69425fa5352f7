"""Schemathesis hooks for scripts/api-fuzz: one check beside schemathesis' own.

A schema-valid request is refused only for what no schema can say, because it depends on the
policy in force rather than on the request's shape:

- /v1/check and /v1/peek: a cost that an enforced rule that applies can never grant at once
  (422, problem type never-allowed);
- /admin/keys: descriptors that do not make a key of the named rule (422 invalid-request, saying
  so);
- /admin/config and /admin/config/validate: YAML that is not a valid configuration (422 with the
  error's file, line, column and field; its shape is checked by response_schema_conformance).

schemathesis.toml lets positive_data_acceptance take those 422s; this check makes sure that a
422 to schema-valid data is one of them and nothing else.
"""

import schemathesis

PROBLEMS = "https://floodgate.dev/problems/"


class RefusedValidRequest(AssertionError):
    pass


@schemathesis.check
def valid_requests_are_refused_only_by_the_policy(ctx, response, case):
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code != 422:
        return None
    path = case.operation.path
    if path in ("/admin/config", "/admin/config/validate"):
        body = response.json()
        if body.get("error", {}).get("message"):
            return None
        raise RefusedValidRequest(f"422 without a configuration error: {response.text}")
    body = response.json()
    kind, detail = body.get("type"), body.get("detail", "")
    if path in ("/v1/check", "/v1/peek") and kind == PROBLEMS + "never-allowed":
        return None
    # `cost` and `costs` together: a rule between two fields that the document states in their
    # descriptions, not in JSON Schema.
    if path in ("/v1/check", "/v1/peek", "/v1/report") and kind == PROBLEMS + "invalid-request" and (
        '"cost" and "costs" are both given' in detail
    ):
        return None
    if path == "/admin/keys" and kind == PROBLEMS + "invalid-request" and (
        "does not apply to these descriptors" in detail or "Missing key descriptor" in detail
    ):
        return None
    raise RefusedValidRequest(f"schema-valid request refused: {response.status_code} {response.text}")
