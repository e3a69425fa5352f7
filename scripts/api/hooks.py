"""Schemathesis hooks for scripts/api-fuzz: one check beside schemathesis' own. It excuses nothing.

The document states every rule the server enforces on a request's shape, so a schema-valid
request is refused only for what depends on the policy in force — not on the request:

- /v1/check, /v1/peek, /v1/reserve: a cost that an enforced rule that applies can never grant at
  once (422, problem type never-allowed);
- /v1/check, /v1/peek, /v1/report: a stated value no rule of the policy takes, or one above a
  rule's bound (422 invalid-request, "Invalid stated value");
- /admin/keys: descriptors that do not make a key of the named rule (422 invalid-request);
- /v1/usage: the same, and descriptors the rule's varying limit or quota calendar cannot use (422
  invalid-request); an unknown rule is a 404;
- /admin/config and /admin/config/validate: YAML that is not a valid configuration — the body is
  a policy (422 with the error's file, line, column and field).

schemathesis.toml lets positive_data_acceptance take a 422 on those operations only. This check
makes sure that such a 422 is one of the refusals above and nothing else: a 422 that a schema
could have stated fails the run.
"""

import schemathesis

PROBLEMS = "https://floodgate.dev/problems/"

# Per operation, what a policy's 422 says: (problem type, a phrase of its detail or None).
# A stated limit, window or block duration that no rule of the policy takes, or one above the bound
# of a rule that takes it (`stated`, docs/api.md "Caller-stated limits").
STATED = (PROBLEMS + "invalid-request", "Invalid stated value")
POLICY_REFUSALS = {
    "/v1/check": [(PROBLEMS + "never-allowed", None), STATED],
    "/v1/peek": [(PROBLEMS + "never-allowed", None), STATED],
    "/v1/report": [STATED],
    "/v1/reserve": [(PROBLEMS + "never-allowed", None)],
    "/admin/keys": [
        (PROBLEMS + "invalid-request", "does not apply to these descriptors"),
        (PROBLEMS + "invalid-request", "Missing key descriptor"),
    ],
    "/v1/usage": [
        (PROBLEMS + "invalid-request", "which is not given"),
        (PROBLEMS + "invalid-request", "does not apply to these descriptors"),
        (PROBLEMS + "invalid-request", "Invalid descriptor"),
    ],
}


class RefusedValidRequest(AssertionError):
    pass


@schemathesis.check
def valid_requests_are_refused_only_by_the_policy(ctx, response, case):
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code != 422:
        return None
    path = case.operation.path
    body = response.json()
    if path in ("/admin/config", "/admin/config/validate"):
        if body.get("error", {}).get("message"):
            return None
        raise RefusedValidRequest(f"422 without a configuration error: {response.text}")
    kind, detail = body.get("type"), body.get("detail", "")
    for refused_kind, phrase in POLICY_REFUSALS.get(path, []):
        if kind == refused_kind and (phrase is None or phrase in detail):
            return None
    raise RefusedValidRequest(f"schema-valid request refused, not by the policy: {response.status_code} {response.text}")
