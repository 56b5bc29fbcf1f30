"""Admin changelists that cost the same on a table of ten million rows as on an empty one.

Django's changelist has three costs that grow with the table, whatever the page shows:

1. The paginator's ``COUNT(*)`` of every row the filters select. ``BoundedPaginator``
   counts at most ``COUNT_LIMIT`` of them (``SELECT COUNT(*) FROM (SELECT ... LIMIT n)``),
   so a full table is counted no further than a small one; the page links stop there too
   (so no page needs an OFFSET deeper than the limit). Beyond the limit the total shown
   is the planner's estimate on PostgreSQL (``EXPLAIN``, no rows read), labelled as one;
   on SQLite only "more than".
2. The date drill-down's ``SELECT DISTINCT date_trunc(...)`` over every row of the year or
   month. ``date_hierarchy_bounded`` offers the calendar's years, months and days between
   the first and the last row instead (``MIN``/``MAX``: two index probes).
3. A filter whose choices come from ``SELECT DISTINCT`` over the table: each list here uses
   fixed choices instead (the registry's jobs, the model's choices).
"""

from __future__ import annotations

import calendar
import json
from datetime import date, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from django.contrib.admin.utils import get_fields_from_path
from django.core.paginator import Paginator
from django.db import connections, models
from django.db.models import Max, Min, QuerySet
from django.utils import formats, timezone
from django.utils.text import capfirst

if TYPE_CHECKING:
    _Paginator = Paginator[Any]
else:  # Paginator is generic only in django-stubs
    _Paginator = Paginator

# Rows a changelist counts exactly (and pages it links: COUNT_LIMIT / list_per_page).
COUNT_LIMIT = 10_000


class BoundedPaginator(_Paginator):
    """A paginator that counts at most ``COUNT_LIMIT`` rows (see the module docstring)."""

    limit = COUNT_LIMIT

    @property
    def _limit(self) -> int:
        # Never under two pages: a truncated list must page (the changelist reads a list
        # that fits on one page without LIMIT).
        return max(self.limit, 2 * int(self.per_page))

    @cached_property
    def _counted(self) -> int:
        """The rows selected, up to the limit + 1: the one more says there are more."""
        object_list = self.object_list
        if isinstance(object_list, QuerySet):
            # Only the key: a list's annotations (the carts' item counts) are not computed
            # for the ten thousand rows counted, only for the page shown.
            return object_list.order_by().values("pk")[: self._limit + 1].count()
        return min(len(object_list), self._limit + 1)

    @cached_property
    def count(self) -> int:
        return min(self._counted, self._limit)

    @property
    def truncated(self) -> bool:
        """More rows are selected than were counted (and than the pages reach)."""
        return self._counted > self._limit

    @cached_property
    def estimate(self) -> int | None:
        """The planner's estimate of the rows selected, when truncated on PostgreSQL."""
        if not self.truncated or not isinstance(self.object_list, QuerySet):
            return None
        return rows_estimate(self.object_list)

    @property
    def estimate_rounded(self) -> str:
        """The estimate to three significant figures: its precision is no better."""
        estimate = self.estimate or 0
        digits = max(len(str(estimate)) - 3, 0)
        return f"{round(estimate, -digits):,}"


def rows_estimate(queryset: QuerySet[Any]) -> int | None:
    """The planner's row estimate for ``queryset`` (``EXPLAIN (FORMAT JSON)``: planned, not
    run); None on a backend without one. The estimate comes from the statistics ANALYZE
    (and autovacuum) keep in pg_class and pg_statistic."""
    connection = connections[queryset.db]
    if connection.vendor != "postgresql":  # seam: SQLite keeps no planner statistics to read
        return None
    sql, params = queryset.order_by().query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return int(plan[0]["Plan"]["Plan Rows"])


# --- The date drill-down -------------------------------------------------------------------------


def date_hierarchy_bounded(cl: Any) -> dict[str, Any]:
    """Django's ``date_hierarchy`` context, with choices from the calendar.

    1. The first and last value of the field among the selected rows (MIN/MAX, served by
       an index on the field) bound the choices; with one year or month between them the
       list starts there, as Django's does.
    2. The choices are every year, month or day of the calendar between them: no DISTINCT
       over the rows, so a day without rows is offered too (its page is simply empty).
    """
    field_name = cl.date_hierarchy
    year, month, day = (cl.params.get(f"{field_name}__{part}") for part in ("year", "month", "day"))

    def link(filters: dict[str, Any]) -> str:
        return str(cl.get_query_string(filters, [f"{field_name}__"]))

    first, last = _bounds(cl.queryset, field_name)
    if not (year or month or day) and first and last and first.year == last.year:
        year = first.year
        month = first.month if first.month == last.month else None
    if year and month and day:
        chosen = date(int(year), int(month), int(day))
        back = {"link": link({f"{field_name}__year": year, f"{field_name}__month": month}), "title": _ym(chosen)}
        return {"show": True, "back": back, "choices": [{"title": _md(chosen)}]}
    if year and month:
        days = _days(int(year), int(month), first, last)
        choices = [{"link": link(_ymd(field_name, d)), "title": _md(d)} for d in days]
        return {
            "show": True,
            "back": {"link": link({f"{field_name}__year": year}), "title": str(year)},
            "choices": choices,
        }
    if year:
        months = [date(int(year), m, 1) for m in range(1, 13) if _month_in(int(year), m, first, last)]
        choices = [{"link": link(_ymd(field_name, m, day=False)), "title": _ym(m)} for m in months]
        return {"show": True, "back": {"link": link({}), "title": "All dates"}, "choices": choices}
    years = range(first.year, last.year + 1) if first and last else range(0)
    return {
        "show": True,
        "back": None,
        "choices": [{"link": link({f"{field_name}__year": str(y)}), "title": str(y)} for y in years],
    }


def _bounds(queryset: QuerySet[Any], field_name: str) -> tuple[date | None, date | None]:
    """The first and last date of the field among the rows (local dates for datetimes)."""
    found = queryset.aggregate(first=Min(field_name), last=Max(field_name))
    field = get_fields_from_path(queryset.model, field_name)[-1]
    bounds = []
    for value in (found["first"], found["last"]):
        if isinstance(field, models.DateTimeField) and isinstance(value, datetime):
            value = (timezone.localtime(value) if timezone.is_aware(value) else value).date()
        bounds.append(value)
    return bounds[0], bounds[1]


def _days(year: int, month: int, first: date | None, last: date | None) -> list[date]:
    days = [date(year, month, d) for d in range(1, calendar.monthrange(year, month)[1] + 1)]
    return [d for d in days if first is not None and last is not None and first <= d <= last]


def _month_in(year: int, month: int, first: date | None, last: date | None) -> bool:
    return (
        first is not None and last is not None and (first.year, first.month) <= (year, month) <= (last.year, last.month)
    )


def _ymd(field_name: str, when: date, *, day: bool = True) -> dict[str, str]:
    params = {f"{field_name}__year": str(when.year), f"{field_name}__month": str(when.month)}
    if day:
        params[f"{field_name}__day"] = str(when.day)
    return params


def _ym(when: date) -> str:
    return str(capfirst(formats.date_format(when, "YEAR_MONTH_FORMAT")))


def _md(when: date) -> str:
    return str(capfirst(formats.date_format(when, "MONTH_DAY_FORMAT")))
