"""The client's address: X-Forwarded-For is believed only from a trusted proxy, read from
the right (tiffin.client_ip's numbered rules)."""

from __future__ import annotations

import ipaddress

import pytest
from django.core.exceptions import ImproperlyConfigured

from tiffin.client_ip import client_ip_from
from tiffin.env import env_lockout_parameters, env_networks

PROXIES = [ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("2001:db8::1/128")]


@pytest.mark.parametrize(
    ("peer", "forwarded_for", "client"),
    [
        # 1. no trusted proxy in front: the peer, whatever the header claims
        ("198.51.100.7", "203.0.113.9", "198.51.100.7"),
        ("198.51.100.7", "", "198.51.100.7"),
        # 2. the rightmost address that is not a trusted proxy
        ("10.0.0.2", "203.0.113.9", "203.0.113.9"),
        ("10.0.0.2", "1.1.1.1, 203.0.113.9", "203.0.113.9"),  # a client's own claim on the left
        ("10.0.0.2", "203.0.113.9, 10.0.0.3", "203.0.113.9"),  # two proxies
        ("2001:db8::1", "2001:db8::77", "2001:db8::77"),
        # 3. garbage stops the walk at the nearest trusted hop
        ("10.0.0.2", "203.0.113.9, nonsense", "10.0.0.2"),
        ("10.0.0.2", "203.0.113.9:5123", "10.0.0.2"),
        ("10.0.0.2", "nonsense, 10.0.0.3", "10.0.0.3"),
        # 4. every hop trusted (or no header): the leftmost
        ("10.0.0.2", "10.0.0.4, 10.0.0.3", "10.0.0.4"),
        ("10.0.0.2", "", "10.0.0.2"),
    ],
)
def test_it_reads_the_client_from_the_right_trusting_only_named_proxies(peer, forwarded_for, client):
    assert client_ip_from(peer=peer, forwarded_for=forwarded_for, trusted=PROXIES) == client


def test_with_no_proxy_named_the_header_is_ignored():
    assert client_ip_from(peer="10.0.0.2", forwarded_for="203.0.113.9", trusted=[]) == "10.0.0.2"


def test_trusted_proxies_are_read_as_networks_and_a_typo_stops_the_start(monkeypatch):
    monkeypatch.setenv("TRUSTED_PROXIES", "10.0.0.5, 172.16.0.0/12,::1")
    assert [str(n) for n in env_networks("TRUSTED_PROXIES", [])] == ["10.0.0.5/32", "172.16.0.0/12", "::1/128"]
    for bad in ["10.0.0.300", "10.0.0.5/16", "proxy.internal"]:
        monkeypatch.setenv("TRUSTED_PROXIES", bad)
        with pytest.raises(ImproperlyConfigured, match=f"TRUSTED_PROXIES: '{bad}'"):
            env_networks("TRUSTED_PROXIES", [])


def test_lockout_parameters_are_single_or_joined_and_a_typo_stops_the_start(monkeypatch):
    monkeypatch.setenv("LOGIN_LOCKOUT_BY", "ip_address, username+ip_address")
    assert env_lockout_parameters("LOGIN_LOCKOUT_BY", []) == ["ip_address", ["username", "ip_address"]]
    monkeypatch.setenv("LOGIN_LOCKOUT_BY", "ip")
    with pytest.raises(ImproperlyConfigured, match="LOGIN_LOCKOUT_BY: 'ip' is not one of"):
        env_lockout_parameters("LOGIN_LOCKOUT_BY", [])


def test_a_proxy_in_front_with_none_trusted_is_a_deploy_warning(settings):
    from tiffin.checks import check_trusted_proxies_behind_a_proxy

    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.TRUSTED_PROXIES = []
    assert [m.id for m in check_trusted_proxies_behind_a_proxy()] == ["tiffin.W001"]
    settings.TRUSTED_PROXIES = [ipaddress.ip_network("10.0.0.0/8")]
    assert check_trusted_proxies_behind_a_proxy() == []
