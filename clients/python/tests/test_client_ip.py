"""The client IP walk, case for case with the server's (``floodgate_tower::ClientIp``'s tests)."""

from __future__ import annotations

import pytest

from floodgate import ConfigError
from floodgate.client_ip import ClientIp


def proxies(header: str = "x-forwarded-for") -> ClientIp:
    return ClientIp(["10.0.0.0/8", "fd00::/8"], header)  # type: ignore[arg-type]


def test_untrusted_peer_ignores_forwarding_headers() -> None:
    assert proxies().resolve("198.51.100.1", ["1.2.3.4"]) == "198.51.100.1"
    assert ClientIp().resolve("10.0.0.1", ["1.2.3.4"]) == "10.0.0.1"


def test_trusted_chain_is_walked_from_the_right() -> None:
    assert proxies().resolve("10.0.0.1", ["203.0.113.7, 10.1.1.1"]) == "203.0.113.7"


def test_spoofed_left_most_entries_do_not_change_the_client() -> None:
    assert proxies().resolve("10.0.0.1", ["1.1.1.1, 10.9.9.9, 203.0.113.7, 10.1.1.1"]) == "203.0.113.7"


def test_repeated_header_lines_form_one_list() -> None:
    assert proxies().resolve("10.0.0.1", ["6.6.6.6", "203.0.113.7", "10.1.1.1"]) == "203.0.113.7"


def test_malformed_entry_stops_at_the_last_trusted_hop() -> None:
    assert proxies().resolve("10.0.0.1", ["203.0.113.7, garbage, 10.1.1.1"]) == "10.1.1.1"
    assert proxies().resolve("10.0.0.1", ["203.0.113.7,,"]) == "10.0.0.1"
    assert proxies().resolve("10.0.0.1", ["unknown"]) == "10.0.0.1"
    assert proxies().resolve("10.0.0.1", ["fe80::1%eth0"]) == "10.0.0.1"


def test_all_trusted_chain_yields_the_left_most_address() -> None:
    assert proxies().resolve("10.0.0.1", ["10.3.3.3, 10.2.2.2"]) == "10.3.3.3"
    assert proxies().resolve("10.0.0.1", []) == "10.0.0.1"


def test_addresses_with_ports_and_brackets_are_accepted() -> None:
    chain = ["[2001:db8::1]:4711, 192.0.2.1:80"]
    assert proxies().resolve("10.0.0.1", chain) == "192.0.2.1"
    assert ClientIp(["10.0.0.0/8", "192.0.2.1"]).resolve("10.0.0.1", chain) == "2001:db8::1"
    assert proxies().resolve("fd00::1", ["2001:db8::2"]) == "2001:db8::2"
    assert proxies().resolve("10.0.0.1", ["192.0.2.1:_hidden"]) == "192.0.2.1"
    assert proxies().resolve("10.0.0.1", ["192.0.2.1:99999"]) == "10.0.0.1"


def test_ipv4_mapped_addresses_count_as_ipv4() -> None:
    assert proxies().resolve("::ffff:10.0.0.1", ["::ffff:203.0.113.7"]) == "203.0.113.7"
    assert ClientIp(["::ffff:10.0.0.0/104"]).resolve("10.0.0.1", ["::ffff:203.0.113.7"]) == "203.0.113.7"


def test_forwarded_header_is_parsed_with_quotes_ports_and_other_parameters() -> None:
    c = proxies("forwarded")
    value = 'for=6.6.6.6, for="[2001:db8::1]:4711";proto=https, For=10.1.1.1;by=10.0.0.1'
    assert c.resolve("10.0.0.1", [value]) == "2001:db8::1"
    assert c.resolve("10.0.0.1", ['for="192.0.2.60:47011";host=example.com']) == "192.0.2.60"


@pytest.mark.parametrize(
    "bad",
    ["for=unknown", "for=_hidden", "proto=https", "for=1.2.3.4;for=5.6.7.8", 'for="1.2.3.4', 'for="1.2\\.3.4"'],
)
def test_forwarded_malformed_elements_stop_the_walk(bad: str) -> None:
    assert proxies("forwarded").resolve("10.0.0.1", [f"for=203.0.113.7, {bad}"]) == "10.0.0.1"


def test_only_the_configured_header_is_read() -> None:
    assert proxies("forwarded").resolve("10.0.0.1", ["203.0.113.7"]) == "10.0.0.1"


def test_non_ascii_header_value_stops_the_walk() -> None:
    assert proxies().resolve("10.0.0.1", ["203.0.113.7\xff"]) == "10.0.0.1"


def test_a_peer_that_is_no_address_has_no_client_ip() -> None:
    assert proxies().resolve("testclient", ["1.2.3.4"]) is None
    assert proxies().resolve(None, []) is None


def test_invalid_trusted_cidr_is_a_named_error() -> None:
    with pytest.raises(ConfigError, match=r"10\.0\.0\.0/33") as refused:
        ClientIp(["10.0.0.0/8", "10.0.0.0/33"])
    assert refused.value.field == "trusted_proxies"
    with pytest.raises(ConfigError):
        ClientIp("10.0.0.0/8")
    with pytest.raises(ConfigError, match="forwarded_header"):
        ClientIp([], "x-real-ip")  # type: ignore[arg-type]
