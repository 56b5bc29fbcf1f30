"""``{{ amount|money_text }}``: money on a page as every command prints it (tiffin.money)."""

from __future__ import annotations

from django import template

from tiffin.money import money_text

register = template.Library()
register.filter("money_text", money_text)
