"""Template tags of the bounded changelists (see tiffin.admin_lists)."""

from __future__ import annotations

from typing import Any

from django import template
from django.contrib.admin.templatetags.base import InclusionAdminNode

from tiffin.admin_lists import date_hierarchy_bounded

register = template.Library()


@register.tag(name="date_hierarchy_bounded")
def date_hierarchy_bounded_tag(parser: Any, token: Any) -> InclusionAdminNode:
    """``{% date_hierarchy_bounded cl %}``: Django's drill-down, with calendar choices."""
    return InclusionAdminNode(
        parser, token, func=date_hierarchy_bounded, template_name="date_hierarchy.html", takes_context=False
    )
