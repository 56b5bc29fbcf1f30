"""The cron explainer: an expression read field by field, its next fire times, its traps.

One service for ``manage.py explain_cron`` and the explainer page. It never reads the
clock (callers pass ``after``) and raises only ``cron.CronError`` for a bad expression or
zone, with the field named; six or seven fields raise ``cron.SecondsFieldError``, whose
message explains seconds-first dialects (Quartz: seconds first, Sunday is 1) and whose
``suggestion`` is the five-field equivalent when there is one.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Any

from scheduling import cron

MAX_COUNT = 100
# How far ahead the DST warnings look.
DST_HORIZON = timedelta(days=366)

_EVERY = {
    "minute": "every minute",
    "hour": "every hour",
    "day-of-month": "every day of the month",
    "month": "every month",
    "day-of-week": "every day of the week",
}
_UNITS = {
    "minute": ("minute", "minutes"),
    "hour": ("hour", "hours"),
    "day-of-month": ("day", "days"),
    "month": ("month", "months"),
    "day-of-week": ("day of the week", "days of the week"),
}
_MONTHS = list(calendar.month_name)
_WEEKDAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]


@dataclass(frozen=True)
class FieldReading:
    name: str
    text: str
    meaning: str


@dataclass(frozen=True)
class FireTime:
    utc: datetime
    local: datetime


@dataclass(frozen=True)
class Trap:
    """A warning: ``code`` is stable for the page to style, ``message`` is for people."""

    code: str
    message: str


@dataclass(frozen=True)
class Explanation:
    expr: str
    normalized: str
    tz: str
    fields: tuple[FieldReading, ...]
    summary: str
    dst_rule: str
    fires: tuple[FireTime, ...]
    warnings: tuple[Trap, ...]

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; instants are ISO 8601 with their offsets."""
        return {
            "expression": self.expr,
            "normalized": self.normalized,
            "timezone": self.tz,
            "summary": self.summary,
            "dst_rule": self.dst_rule,
            "fields": [{"name": f.name, "text": f.text, "meaning": f.meaning} for f in self.fields],
            "next": [{"utc": f.utc.isoformat(), "local": f.local.isoformat()} for f in self.fires],
            "warnings": [{"code": w.code, "message": w.message} for w in self.warnings],
        }


def cron_explain(*, expr: str, tz: str = "UTC", count: int = 5, after: datetime) -> Explanation:
    """Explain ``expr`` in zone ``tz``: fields, summary, the next ``count`` fires after
    ``after`` (aware), and warnings. CronError for a bad expression or zone."""
    spec, place = cron.parse(expr), cron.zone(tz)
    if not 1 <= count <= MAX_COUNT:
        raise ValueError(f"count must be between 1 and {MAX_COUNT}, got {count}")
    ticks = cron.next_ticks(expr, tz, after, count)
    return Explanation(
        expr=expr.strip(),
        normalized=spec.text,
        tz=tz,
        fields=_readings(spec),
        summary=f"{_summary(spec)} ({tz} time)",
        dst_rule=_dst_rule(spec, place, after),
        fires=tuple(FireTime(utc=tick, local=tick.astimezone(place)) for tick in ticks),
        warnings=_warnings(spec, place, after, found_any=bool(ticks)),
    )


# --- fields -----------------------------------------------------------------------------


def _values(spec: cron.CronSpec) -> tuple[frozenset[int], ...]:
    return (spec.minutes, spec.hours, spec.days, spec.months, spec.weekdays)


def _readings(spec: cron.CronSpec) -> tuple[FieldReading, ...]:
    return tuple(
        FieldReading(name=name, text=text, meaning=_meaning(name, text, values))
        for name, text, values in zip(cron.FIELD_NAMES, spec.fields, _values(spec), strict=True)
    )


def _meaning(name: str, text: str, values: frozenset[int]) -> str:
    """``*/15`` in minutes reads "every 15 minutes: 0, 15, 30 and 45"; ``9-17`` in hours
    reads "hours 9-17"; names are spelled out for months and days of the week."""
    if text == "*":
        return _EVERY[name]
    listing = _listing(name, values)
    if "," not in text and "/" in text:
        base, _, step = text.partition("/")
        start = "" if base == "*" else f" from {base.replace('-', ' to ')}"
        return f"every {step} {_UNITS[name][1]}{start}: {listing}"
    if name in ("month", "day-of-week"):
        return listing
    return _plain(name, values)


def _listing(name: str, values: frozenset[int]) -> str:
    """Values in words, runs of three or more as ranges, long lists elided."""
    ordered = sorted(values, key=(lambda v: (v - 1) % 7) if name == "day-of-week" else None)
    runs = _runs(ordered, name)
    words = [_label(name, a) if a == b else _range_label(name, a, b) for a, b in runs]
    if len(words) > 8:
        words = [*words[:3], "...", words[-1]]
        return ", ".join(words) + f" ({len(values)} values)"
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _runs(ordered: list[int], name: str) -> list[tuple[int, int]]:
    """Group consecutive values (Saturday-Sunday counts as consecutive); short runs split."""
    runs: list[list[int]] = []
    for value in ordered:
        if runs and _follows(name, runs[-1][-1], value):
            runs[-1].append(value)
        else:
            runs.append([value])
    pairs: list[tuple[int, int]] = []
    for run in runs:
        pairs += [(run[0], run[-1])] if len(run) >= 3 else [(v, v) for v in run]
    return pairs


def _follows(name: str, previous: int, value: int) -> bool:
    return value == previous + 1 or (name == "day-of-week" and (previous, value) == (6, 0))


def _label(name: str, value: int) -> str:
    if name == "month":
        return _MONTHS[value]
    if name == "day-of-week":
        return _WEEKDAYS[value]
    return str(value)


def _range_label(name: str, low: int, high: int) -> str:
    if name in ("month", "day-of-week"):
        return f"{_label(name, low)} to {_label(name, high)}"
    return f"{low}-{high}"


# --- summary ------------------------------------------------------------------------------


def _summary(spec: cron.CronSpec) -> str:
    parts = [_time_phrase(spec), _day_phrase(spec)]
    if spec.months != frozenset(range(1, 13)):
        parts.append(f"in {_listing('month', spec.months)}")
    sentence = ", ".join(parts)
    return sentence[0].upper() + sentence[1:]


def _time_phrase(spec: cron.CronSpec) -> str:
    """A few fixed times as "at 02:00"; otherwise the minutes and the hours they cover."""
    if spec.fixed_time and len(spec.offsets) <= 4:
        return "at " + _and_list([f"{t:%H:%M}" for t in spec.times])
    minute = spec.fields[0]
    if minute == "*":
        phrase = "every minute"
    elif minute.startswith("*/") and "," not in minute:
        phrase = f"every {minute[2:]} minutes"
    else:
        phrase = f"at {_plain('minute', spec.minutes)}"
    if len(spec.hours) == 24:
        return phrase if phrase.startswith("every") else f"{phrase} of every hour"
    return f"{phrase} during {_plain('hour', spec.hours)}"


def _day_phrase(spec: cron.CronSpec) -> str:
    by_month = "" if len(spec.days) == 31 else f"on {_plain('day-of-month', spec.days)} of the month"
    by_week = "" if len(spec.weekdays) == 7 else f"on {_listing('day-of-week', spec.weekdays)}"
    if not spec.day_and:
        return f"{by_month} or {by_week}" if by_month and by_week else "every day"
    if by_month and by_week:
        return f"{by_month} if it falls {by_week}"
    return by_month or by_week or "every day"


def _plain(name: str, values: frozenset[int]) -> str:
    """The unit and the values, no steps: minute 5, hours 9-17, days 1 and 15."""
    return f"{_UNITS[name][0 if len(values) == 1 else 1]} {_listing(name, values)}"


def _and_list(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


# --- warnings -----------------------------------------------------------------------------


def _warnings(spec: cron.CronSpec, place: tzinfo, after: datetime, *, found_any: bool) -> tuple[Trap, ...]:
    traps = [*_firing_traps(spec, after, found_any), *_day_traps(spec), *_step_traps(spec)]
    return tuple(traps + _dst_traps(spec, place, after))


def _firing_traps(spec: cron.CronSpec, after: datetime, found_any: bool) -> list[Trap]:
    if not spec.can_fire:
        months = _listing("month", spec.months)
        days = _listing("day-of-month", spec.days)
        return [Trap("never-fires", f"never fires: there is no day {days} in {months}")]
    if not found_any:
        message = f"does not fire in the {cron.SEARCH_YEARS} years after {after.isoformat()}"
        return [Trap("never-fires", message)]
    return []


def _day_traps(spec: cron.CronSpec) -> list[Trap]:
    """Day-of-month and day-of-week: OR when both are restricted, AND behind a '*'."""
    dom, dow = spec.fields[2], spec.fields[4]
    if not spec.day_and:
        only_dom = " ".join((*spec.fields[:4], "*"))
        return [
            Trap(
                "day-or",
                f"day-of-month {dom!r} and day-of-week {dow!r} are both restricted, so they combine with OR: "
                f"it runs on {_plain('day-of-month', spec.days)} of the month and on every "
                f"{_listing('day-of-week', spec.weekdays)}, not only when both match. To require both, "
                f"schedule {only_dom!r} and check the weekday in the job.",
            )
        ]
    if len(spec.days) < 31 and len(spec.weekdays) < 7:
        star = dom if dom.startswith("*") else dow
        return [
            Trap(
                "day-and",
                f"{star!r} starts with '*', so the day fields combine with AND here (cron only ORs them "
                "when neither starts with '*'): it runs only on days that match both.",
            )
        ]
    return []


_CYCLES = {"minute": "hour", "hour": "day"}


def _step_traps(spec: cron.CronSpec) -> list[Trap]:
    """A minute or hour step that does not divide its cycle leaves a short last interval."""
    traps: list[Trap] = []
    for name, text, values, cycle in (
        ("minute", spec.fields[0], spec.minutes, 60),
        ("hour", spec.fields[1], spec.hours, 24),
    ):
        ordered = sorted(values)
        if "/" in text and len(ordered) > 1:
            step, wrap = ordered[1] - ordered[0], ordered[0] + cycle - ordered[-1]
            if wrap < step:
                traps.append(
                    Trap(
                        "uneven-step",
                        f"{text!r} restarts every {_CYCLES[name]}: after {ordered[-1]} the next is {ordered[0]}, "
                        f"{wrap} {_UNITS[name][1]} later, not {step}",
                    )
                )
    return traps


# --- daylight saving ----------------------------------------------------------------------


def _dst_rule(spec: cron.CronSpec, place: tzinfo, after: datetime) -> str:
    if not _transitions(place, after):
        return f"{place} does not change its clocks in the coming year; no DST rule applies."
    if spec.fixed_time:
        return (
            "Fixed local time (neither minute nor hour starts with '*'): a time the clocks skip runs "
            "once, right after the jump; a time that happens twice runs once, the first time."
        )
    return (
        "Real time (minute or hour starts with '*'): it runs whenever the local clock shows a matching "
        "time, so twice in a repeated hour and not at all in a skipped one."
    )


def _transitions(place: tzinfo, after: datetime) -> list[date]:
    try:
        start = after.astimezone(place).date()
        return cron.dst_transition_dates(place, start, start + DST_HORIZON)
    except OverflowError:  # within a year of 1 or 9999: no zone rules there worth warning about
        return []


def _dst_traps(spec: cron.CronSpec, place: tzinfo, after: datetime) -> list[Trap]:
    traps: list[Trap] = []
    for day in _transitions(place, after):
        if spec.matches_date(day):
            traps += _transition_traps(spec, place, day)
    return traps


def _transition_traps(spec: cron.CronSpec, place: tzinfo, day: date) -> list[Trap]:
    """The wall times of ``day`` that the clocks skip or repeat, in one warning each."""
    midnight = datetime.combine(day, time())
    walls = [midnight + step for step in spec.offsets]
    skipped = [w for w in walls if cron.wall_time_kind(place, w) == "skipped"]
    repeated = [w for w in walls if cron.wall_time_kind(place, w) == "repeated"]
    traps = []
    if skipped:
        traps.append(Trap("dst-skipped", _skipped_message(spec, place, day, skipped)))
    if repeated:
        traps.append(Trap("dst-repeated", _repeated_message(spec, place, day, repeated)))
    return traps


def _skipped_message(spec: cron.CronSpec, place: tzinfo, day: date, walls: list[datetime]) -> str:
    verb = "does not exist" if len(walls) == 1 else "do not exist"
    head = f"on {day.isoformat()} the clocks go forward and local {_times(walls)} {verb} in {place}"
    if not spec.fixed_time:
        return f"{head}; following real time, {_runs_word(walls)} skipped"
    (instant,) = cron.local_instants(place, walls[0], fixed_time=True)
    return f"{head}; it runs once right after the jump, at {_both(instant, place)}"


def _repeated_message(spec: cron.CronSpec, place: tzinfo, day: date, walls: list[datetime]) -> str:
    verb = "happens" if len(walls) == 1 else "happen"
    head = f"on {day.isoformat()} the clocks go back and local {_times(walls)} {verb} twice in {place}"
    first = cron.local_instants(place, walls[0], fixed_time=True)[0]
    if spec.fixed_time:
        return f"{head}; it runs once, the first time, at {_both(first, place)}"
    return f"{head}; following real time, it runs both times, from {_both(first, place)}"


def _times(walls: list[datetime]) -> str:
    labels = [f"{w:%H:%M}" for w in walls]
    if len(labels) > 4:
        return f"{labels[0]}-{labels[-1]} ({len(labels)} run times)"
    return _and_list(labels)


def _runs_word(walls: list[datetime]) -> str:
    return "that run is" if len(walls) == 1 else f"those {len(walls)} runs are"


def _both(instant: datetime, place: tzinfo) -> str:
    local = instant.astimezone(place)
    return f"{local:%H:%M} {local.tzname()} ({instant.astimezone(UTC):%H:%M} UTC)"
