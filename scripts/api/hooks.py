"""Schemathesis hooks for scripts/api-fuzz: one check beside schemathesis' own.

A schema-valid request is refused only for what no schema can say, because it depends on the
policy in force rather than on the request's shape:

- /v1/check, /v1/peek and /v1/reserve: a cost that an enforced rule that applies can never grant
  at once (422, problem type never-allowed); /v1/reserve: a `ttl` of 0 or above 24h (422);
- /admin/keys: descriptors that do not make a key of the named rule (422 invalid-request, saying
  so);
- /v1/usage: the same, and descriptors the rule's varying limit or quota calendar cannot use (422
  invalid-request, saying so); an unknown rule is a 404;
- /admin/config and /admin/config/validate: YAML that is not a valid configuration (422 with the
  error's file, line, column and field; its shape is checked by response_schema_conformance);
- /v1/simulate: parameters its algorithm does not take or lacks, requests out of time order, a cost
  the limit never grants, too many samples (400 invalid-request naming the field).

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
    if meta is None or not meta.generation.mode.is_positive:
        return None
    path = case.operation.path
    # /v1/simulate: the algorithm's parameters are read by the configuration's parser, and the
    # requests' order, costs and sampling bounds depend on the limit: a 400 invalid-request naming
    # what is wrong; never a malformed-request (the body is JSON).
    if path == "/v1/simulate" and response.status_code == 400:
        body = response.json()
        if body.get("type") == PROBLEMS + "invalid-request" and body.get("detail"):
            return None
        raise RefusedValidRequest(f"schema-valid simulation refused as malformed: {response.text}")
    if response.status_code != 422:
        return None
    if path in ("/admin/config", "/admin/config/validate"):
        body = response.json()
        if body.get("error", {}).get("message"):
            return None
        raise RefusedValidRequest(f"422 without a configuration error: {response.text}")
    body = response.json()
    kind, detail = body.get("type"), body.get("detail", "")
    if path in ("/v1/check", "/v1/peek", "/v1/reserve") and kind == PROBLEMS + "never-allowed":
        return None
    # `cost` and `costs` together, and `costs` whose every value is 0: rules the document states in
    # the fields' descriptions, not in JSON Schema (which says at least one name).
    if path in ("/v1/check", "/v1/peek", "/v1/report", "/v1/reserve") and kind == PROBLEMS + "invalid-request" and (
        '"cost" and "costs" are both given' in detail
        or '"costs" must give at least one dimension a cost of 1 or more' in detail
    ):
        return None
    if path == "/admin/keys" and kind == PROBLEMS + "invalid-request" and (
        "does not apply to these descriptors" in detail or "Missing key descriptor" in detail
    ):
        return None
    # /v1/reserve: a `ttl` of the duration grammar (the schema's pattern) that is 0, above 24h, or
    # too large to represent: bounds its description states.
    if path == "/v1/reserve" and kind == PROBLEMS + "invalid-request" and detail.startswith('"ttl"'):
        return None
    # /v1/usage: descriptors that make no key of the rule, or that its limit or calendar cannot use.
    if path == "/v1/usage" and kind == PROBLEMS + "invalid-request" and (
        "which is not given" in detail
        or "does not apply to these descriptors" in detail
        or "is given twice" in detail
        or "Invalid descriptor" in detail
    ):
        return None
    raise RefusedValidRequest(f"schema-valid request refused: {response.status_code} {response.text}")
