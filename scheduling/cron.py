"""Cron expressions: validation, and the instants they fire at under cronie's DST rules.

Tiffin reads five-field POSIX cron (minute hour day-of-month month day-of-week) the way
Vixie cron and its descendants (cronie, Debian cron) do, and ``cronsim`` checks it in the
tests:

- a field is a comma list of ``*``, ``N``, ``A-B``, each optionally ``/STEP``; ``N/STEP``
  means ``N-max/STEP``; month and day-of-week also take three-letter English names;
  day-of-week 0 and 7 are Sunday. The macros ``@hourly`` ``@daily`` ``@midnight``
  ``@weekly`` ``@monthly`` ``@yearly`` ``@annually`` stand for their five-field forms.
- when both day fields are restricted they combine with OR (``0 0 13 * 5`` fires on every
  13th and every Friday). A field that starts with ``*`` (``*/2`` too) counts as
  unrestricted for this rule, exactly as Vixie cron's DOM_STAR/DOW_STAR flags.
- in a zone with DST, an expression whose minute and hour fields both start with something
  other than ``*`` is a *fixed-time* job: a wall time the clocks skip fires once at the
  first instant after the gap, and a wall time that happens twice fires once, at its first
  occurrence. Any other expression follows real time: it fires at every instant whose
  wall time matches (twice in the repeated hour, never in the skipped one). This is
  Debian cron's MIN_STAR/HR_STAR rule, as cronsim implements it.

croniter (pinned 7.0.0) is not used for evaluation: it reads ``5-5`` as "every minute",
ORs ``*/2`` day-of-month with a restricted day-of-week, and fires fixed local times twice
in the repeated autumn hour (``tests/unit/test_cron_croniter_divergence.py`` pins each
case). Nor is cronsim, which gives the same ticks (the tests use it as the oracle) but
took about 50 (Europe/London) to 1,500 (UTC) times as long for a month of five-minute
ticks, and every tick pass walks each job's look-back (BENCHMARKS.md, "Measured once").
The parser and the date walk here are small, strict and fast instead.

All public functions take and return aware datetimes; returned ticks are in UTC.
"""

from __future__ import annotations

import bisect
import calendar
import functools
import re
import zoneinfo
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Literal

FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")

# Searches give up after this long without a tick (as cronsim does). A feasible
# expression fires at least every 40 years (29 February on a given weekday).
SEARCH_YEARS = 50
_SEARCH_SPAN = timedelta(days=366 * SEARCH_YEARS)
# Longest expression accepted: the width of the ``schedules.cron`` column.
MAX_EXPRESSION_LENGTH = 200
# Margins keep date arithmetic (one local day either side, offsets up to 26 h) in range.
_EARLIEST = datetime(1, 1, 4, tzinfo=UTC)
_LATEST = datetime(9999, 12, 28, tzinfo=UTC)
_UNLIMITED = 2**62

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTH_NAMES = {name.upper(): i for i, name in enumerate(calendar.month_abbr) if name}
_DAY_NAMES = {name: i for i, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))}
# Extensions other crons accept, matched on a whole token so month and day names that
# contain the letters (JUL, WED, THU) are not mistaken for them.
_EXTENSIONS = (
    (re.compile(r".*\?.*"), "'?' is Quartz's 'no specific value'; write '*'"),
    (re.compile(r".*#.*"), "'#' (nth weekday) is a Quartz/croniter extension, not POSIX cron"),
    (re.compile(r"[0-9]*W|W[0-9]+|LW", re.I), "'W' (nearest weekday) is a Quartz/croniter extension, not POSIX cron"),
    (re.compile(r"[0-9]*L|L-?[0-9]*", re.I), "'L' (last) is a Quartz/croniter extension, not POSIX cron"),
    (re.compile(r"H(\(.*\))?", re.I), "'H' (hashed value) is a Jenkins extension, not POSIX cron"),
    (re.compile(r"R", re.I), "'R' (random value) is a croniter extension, not POSIX cron"),
)

WallTimeKind = Literal["ordinary", "skipped", "repeated"]


class CronError(ValueError):
    """A bad cron expression or zone; ``field`` names the offending field, if one is."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class SecondsFieldError(CronError):
    """Six or seven fields: a seconds-first dialect (Quartz, Spring), not POSIX cron.

    ``suggestion`` is the five-field equivalent when there is an exact one.
    """

    def __init__(self, message: str, *, suggestion: str | None) -> None:
        super().__init__(message)
        self.suggestion = suggestion


@dataclass(frozen=True)
class _Rule:
    name: str
    low: int
    high: int
    names: Mapping[str, int]

    def error(self, text: str, problem: str) -> CronError:
        return CronError(f"{self.name} field {text!r}: {problem}", field=self.name)


# What each field's step restarts with, for error messages.
_CYCLE = {"minute": "hour", "hour": "day", "day-of-month": "month", "month": "year", "day-of-week": "week"}

_RULES = (
    _Rule("minute", 0, 59, {}),
    _Rule("hour", 0, 23, {}),
    _Rule("day-of-month", 1, 31, {}),
    _Rule("month", 1, 12, _MONTH_NAMES),
    _Rule("day-of-week", 0, 7, _DAY_NAMES),
)


@dataclass(frozen=True)
class CronSpec:
    """A parsed five-field expression. Day-of-week values are 0-6, Sunday 0."""

    text: str
    fields: tuple[str, str, str, str, str]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    # Either day field starts with '*': the day fields combine with AND, otherwise OR.
    day_and: bool
    # Neither minute nor hour starts with '*': DST gaps and repeats fire once.
    fixed_time: bool
    # Sorted offsets of the matching times of day from local midnight.
    offsets: tuple[timedelta, ...] = field(repr=False, compare=False)

    @property
    def times(self) -> tuple[time, ...]:
        return tuple(time(o.seconds // 3600, o.seconds // 60 % 60) for o in self.offsets)

    @property
    def can_fire(self) -> bool:
        """False when no date can ever match (``0 0 30 2 *``): only an AND of day fields
        with days no chosen month has. Anything else recurs within 40 years."""
        if not self.day_and:
            return True
        return any(day <= _longest_month(month) for day in self.days for month in self.months)

    def matches_date(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        by_month = day.day in self.days
        by_week = (day.weekday() + 1) % 7 in self.weekdays
        return (by_month and by_week) if self.day_and else (by_month or by_week)


def _longest_month(month: int) -> int:
    return 29 if month == 2 else calendar.monthrange(2001, month)[1]


# --- parsing ---------------------------------------------------------------------------


def validate(expr: str) -> None:
    """Raise CronError (naming the field) unless ``expr`` is a valid five-field expression."""
    parse(expr)


@functools.lru_cache(maxsize=512)
def parse(expr: str) -> CronSpec:
    """Parse ``expr`` into a CronSpec, raising CronError that names the bad field."""
    fields = _split(expr)
    values = [_parse_field(rule, text) for rule, text in zip(_RULES, fields, strict=True)]
    minutes, hours, days, months, weekdays = values
    offsets = sorted(timedelta(hours=h, minutes=m) for h in hours for m in minutes)
    return CronSpec(
        text=" ".join(fields),
        fields=(fields[0], fields[1], fields[2], fields[3], fields[4]),
        minutes=minutes,
        hours=hours,
        days=days,
        months=months,
        weekdays=frozenset(v % 7 for v in weekdays),
        day_and=fields[2].startswith("*") or fields[4].startswith("*"),
        fixed_time=not (fields[0].startswith("*") or fields[1].startswith("*")),
        offsets=tuple(offsets),
    )


def _split(expr: str) -> list[str]:
    """Split into five fields, expanding a macro; explain six- and seven-field dialects."""
    if len(expr) > MAX_EXPRESSION_LENGTH:
        raise CronError(f"the expression is longer than {MAX_EXPRESSION_LENGTH} characters")
    fields = expr.split()
    if len(fields) == 1 and fields[0].startswith("@"):
        return _macro(fields[0]).split()
    if len(fields) in (6, 7):
        suggestion = _quartz_suggestion(fields)
        raise SecondsFieldError(_seconds_message(fields, suggestion), suggestion=suggestion)
    if len(fields) != 5:
        raise CronError(
            f"{expr.strip()!r} has {len(fields)} field(s); cron takes five: minute hour day-of-month month day-of-week"
        )
    return fields


def _macro(word: str) -> str:
    if word.lower() == "@reboot":
        raise CronError("'@reboot' runs when a server boots, not on a clock; Tiffin has no boot-time jobs")
    if word.lower() not in _MACROS:
        raise CronError(f"unknown macro {word!r}; known: {', '.join(_MACROS)}")
    return _MACROS[word.lower()]


def _seconds_message(fields: list[str], suggestion: str | None) -> str:
    extra = " and a trailing year" if len(fields) == 7 else ""
    return (
        f"{len(fields)} fields given; Tiffin reads five-field POSIX cron (minute hour day-of-month month "
        f"day-of-week). {len(fields)} fields usually mean a seconds-first dialect such as Quartz or Spring "
        f"(seconds first{extra}), where '?' means 'no specific value' and day-of-week 1 is Sunday; "
        "in POSIX cron 0 or 7 is Sunday and 1 is Monday."
        + (f" The five-field equivalent is {suggestion!r}." if suggestion else "")
    )


def _quartz_suggestion(fields: list[str]) -> str | None:
    """The POSIX form of a Quartz expression that fires at second 0, if there is one.

    1. Only second ``0`` and an unrestricted year translate exactly.
    2. ``?`` becomes ``*``; Quartz day-of-week numbers 1-7 (Sunday 1) drop by one.
    3. The result must parse; otherwise there is no suggestion.
    """
    if fields[0] != "0" or (len(fields) == 7 and fields[6] not in ("*", "?")):
        return None
    _, minute, hour, dom, month, dow = fields[:6]
    numbers = re.findall(r"[0-9]+", dow)
    if any(not 1 <= int(n) <= 7 for n in numbers if len(n) <= 4) or "/" in dow:
        return None  # Quartz has no day 0, and a step would need re-basing
    dow = "*" if dow == "?" else re.sub(r"[0-9]+", lambda m: str(int(m.group()) - 1), dow)
    candidate = " ".join((minute, hour, "*" if dom == "?" else dom, month, dow))
    try:
        parse(candidate)
    except CronError:
        return None
    return candidate


def _parse_field(rule: _Rule, text: str) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        values |= _parse_item(rule, text, item)
    return frozenset(values)


def _parse_item(rule: _Rule, text: str, item: str) -> set[int]:
    """One list item: ``*``, ``N``, ``A-B``, each with an optional ``/STEP``."""
    if not item:
        raise rule.error(text, "empty item in a comma list")
    for pattern, message in _EXTENSIONS:
        if pattern.fullmatch(item.partition("/")[0]):
            raise rule.error(text, message)
    base, slash, step_text = item.partition("/")
    step = _step(rule, text, step_text) if slash else 1
    if base == "*":
        low, high = rule.low, rule.high
    elif "-" in base:
        low, high = _range(rule, text, base)
    else:
        low = _value(rule, text, base)
        high = rule.high if slash else low
    return set(range(low, high + 1, step))


def _range(rule: _Rule, text: str, base: str) -> tuple[int, int]:
    first, _, last = base.partition("-")
    low, high = _value(rule, text, first), _value(rule, text, last)
    if high < low:
        raise rule.error(text, f"range {base!r} runs backwards; POSIX cron has no wrap-around ranges")
    return low, high


def _step(rule: _Rule, text: str, step_text: str) -> int:
    size = rule.high - rule.low + 1 if rule.name != "day-of-week" else 7
    if not _is_number(step_text) or not 1 <= int(step_text) <= size:
        raise rule.error(
            text,
            f"step {step_text!r} must be a whole number from 1 to {size}; "
            f"steps restart at each {_CYCLE[rule.name]}, so a larger one cannot spread further",
        )
    return int(step_text)


def _value(rule: _Rule, text: str, token: str) -> int:
    upper = token.upper()
    if upper in rule.names:
        return rule.names[upper]
    if _is_number(token):
        if rule.low <= int(token) <= rule.high:
            return int(token)
        raise rule.error(text, f"{int(token)} is out of range {rule.low}-{rule.high}")
    raise rule.error(text, _not_a_value(rule, token))


def _is_number(token: str) -> bool:
    # ASCII only: str.isdigit() accepts '²' and '٣', which int() then reads or rejects.
    return 0 < len(token) <= 4 and token.isascii() and token.isdigit()


def _not_a_value(rule: _Rule, token: str) -> str:
    if len(token) > 4 and token.isascii() and token.isdigit():
        return f"{token[:12]}... is out of range {rule.low}-{rule.high}"
    if not token:
        return "a value is missing (negative numbers and empty range ends are not allowed)"
    names = f" or a name such as {next(iter(rule.names))}" if rule.names else ""
    return f"{token[:20]!r} is not a number{names}"


# --- time zones and wall times ---------------------------------------------------------


@functools.cache
def _zone_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA zone ``name``; CronError if tzdata does not know it."""
    if name not in _zone_names():
        raise CronError(f"unknown time zone {name[:60]!r}; use an IANA name such as 'Europe/London' or 'UTC'")
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise CronError(f"time zone {name!r} could not be loaded") from None


def wall_time_kind(tz: tzinfo, local: datetime) -> WallTimeKind:
    """Whether naive wall time ``local`` exists once, is skipped, or repeats in ``tz``."""
    first, second = _readings(tz, local)
    if first == second:
        return "ordinary"
    return "repeated" if first < second else "skipped"


def _readings(tz: tzinfo, local: datetime) -> tuple[datetime, datetime]:
    """``local`` read with fold=0 and fold=1 (PEP 495), in UTC.

    The two agree for an ordinary wall time; in a repeat fold=0 is the earlier, in a gap
    fold=0 is the later.
    """
    first = local.replace(tzinfo=tz, fold=0).astimezone(UTC)
    return first, local.replace(tzinfo=tz, fold=1).astimezone(UTC)


def local_instants(tz: tzinfo, local: datetime, *, fixed_time: bool) -> list[datetime]:
    """The UTC instants at which a job due at naive wall time ``local`` fires.

    1. An ordinary wall time fires once.
    2. A repeated one fires at its first occurrence (fixed time) or at both (real time).
    3. A skipped one fires at the first instant after the gap (fixed time) or never.
    """
    first, second = _readings(tz, local)
    if first == second:
        return [first]
    if first < second:
        return [first] if fixed_time else [first, second]
    return [_after_gap(tz, local)] if fixed_time else []


@functools.lru_cache(maxsize=1024)
def _after_gap(tz: tzinfo, local: datetime) -> datetime:
    # Minute by minute, as cronsim does: gaps start and end on whole minutes.
    probe = local
    while wall_time_kind(tz, probe) == "skipped":
        probe += timedelta(minutes=1)
    return probe.replace(tzinfo=tz, fold=0).astimezone(UTC)


def dst_transition_dates(tz: tzinfo, first: date, last: date) -> list[date]:
    """Local dates in [first, last] with a wall-clock minute that ``tz`` skips or repeats."""
    return [day for day in _days(first, last) if _day_shift(tz, day)]


@functools.lru_cache(maxsize=4096)
def _day_offsets(tz: tzinfo, day: date) -> tuple[timedelta, ...]:
    """UTC offsets of local ``day`` at 00:00 and 23:59, each read with both folds.

    All four agree exactly when every wall time of the day (cron's are whole minutes)
    exists once with one offset: a skipped or repeated minute reads differently by fold,
    and tzdata has no day with two transitions that cancel out.
    """
    start = datetime.combine(day, time(), tzinfo=tz)
    end = datetime.combine(day, time(23, 59), tzinfo=tz)
    return tuple(_offset(moment.replace(fold=fold)) for moment in (start, end) for fold in (0, 1))


def _day_shift(tz: tzinfo, day: date) -> timedelta:
    """How far the clocks move on local ``day`` (zero on most days)."""
    offsets = _day_offsets(tz, day)
    return max(offsets) - min(offsets)


def _offset(moment: datetime) -> timedelta:
    return moment.utcoffset() or timedelta(0)


def _days(first: date, last: date) -> Iterator[date]:
    day = first
    while day <= last:
        yield day
        day += timedelta(days=1)


# --- ticks -------------------------------------------------------------------------------


def ticks_between(expr: str, tz: str, after: datetime, until: datetime, limit: int | None = None) -> list[datetime]:
    """Every tick t with after < t <= until, ascending, in UTC; at most ``limit`` of them."""
    spec, place = parse(expr), _evaluation_zone(tz)
    if not spec.can_fire:
        return []
    return _collect(spec, place, _aware(after, "after"), _aware(until, "until"), limit)


def next_ticks(expr: str, tz: str, after: datetime, count: int) -> list[datetime]:
    """The first ``count`` ticks strictly after ``after``, in UTC.

    Searches in spans of SEARCH_YEARS from the last tick found, so a rare expression
    (``0 0 29 2 *``) still yields ``count`` ticks, and a never-firing one yields [].
    """
    spec, place = parse(expr), _evaluation_zone(tz)
    ticks: list[datetime] = []
    cursor = _aware(after, "after")
    while spec.can_fire and len(ticks) < count and cursor < _LATEST:
        found = _collect(spec, place, cursor, _later(cursor, _SEARCH_SPAN), count - len(ticks))
        if not found:
            break
        ticks += found
        cursor = found[-1]
    return ticks


def latest_tick(expr: str, tz: str, at: datetime) -> datetime | None:
    """The latest tick at or before ``at`` in UTC; None if none in SEARCH_YEARS before it.

    Looks back over windows that double from one hour, so a frequent expression costs a
    handful of ticks and a yearly one a few dozen months.
    """
    spec, place, until = parse(expr), _evaluation_zone(tz), _aware(at, "at")
    span = timedelta(hours=1)
    while spec.can_fire:
        found = _collect(spec, place, _earlier(until, span), until, None)
        if found:
            return found[-1]
        if span >= _SEARCH_SPAN or _earlier(until, span) == _EARLIEST:
            break
        span = min(span * 2, _SEARCH_SPAN)
    return None


def _evaluation_zone(name: str) -> tzinfo:
    # datetime.UTC lets _day_ticks skip the offset lookups.
    return UTC if name in ("UTC", "Etc/UTC") else zone(name)


def _aware(moment: datetime, name: str) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, got {moment!r}")
    try:
        in_utc = moment.astimezone(UTC)
    except OverflowError:  # within a day of year 1 or 9999
        return _EARLIEST if moment.year < 5000 else _LATEST
    return min(max(in_utc, _EARLIEST), _LATEST)


def _later(moment: datetime, span: timedelta) -> datetime:
    return moment + span if _LATEST - moment > span else _LATEST


def _earlier(moment: datetime, span: timedelta) -> datetime:
    return moment - span if moment - _EARLIEST > span else _EARLIEST


def _collect(spec: CronSpec, tz: tzinfo, after: datetime, until: datetime, limit: int | None) -> list[datetime]:
    """Ticks in (after, until], ascending, at most ``limit``.

    1. Walk the local dates that match, from the day before ``after`` to the day after
       ``until`` (the margin covers offsets and repeated hours around midnight).
    2. Turn each date's wall times into UTC instants and keep those in range.
    3. Stop once ``limit`` is reached; on a transition date finish one more date first
       (a repeat crossing midnight can put its last tick after the next date's first).
    4. Sort and dedupe if a transition date was involved (a gap can map two fixed times
       to one instant); other dates come out in order already.
    """
    first = after.astimezone(tz).date() - timedelta(days=1)
    last = until.astimezone(tz).date() + timedelta(days=1)
    room = limit if limit is not None else _UNLIMITED
    found: list[datetime] = []
    stop: date | None = None
    ordered = True
    for day in _matching_dates(spec, first, last):
        if stop is not None and day > stop:
            break
        shifts = tz is not UTC and bool(_day_shift(tz, day))
        found += _day_ticks(spec, tz, day, after, until, room)
        ordered = ordered and not shifts
        if stop is None and len(found) >= room and not ordered:
            found = _sorted_unique(found)  # a gap ending at midnight repeats the next day's first tick
        if stop is None and len(found) >= room:
            stop = day + timedelta(days=1) if shifts else day
    ticks = found if ordered else _sorted_unique(found)
    return ticks[: max(room, 0)]


def _sorted_unique(ticks: list[datetime]) -> list[datetime]:
    # Timsort is linear on these nearly sorted lists; set() would hash 50k datetimes.
    ticks = sorted(ticks)
    return [tick for i, tick in enumerate(ticks) if i == 0 or tick != ticks[i - 1]]


def _matching_dates(spec: CronSpec, first: date, last: date) -> Iterator[date]:
    """Dates in [first, last] the day fields match, skipping months the month field excludes."""
    year, month = first.year, first.month
    while (year, month) <= (last.year, last.month):
        if month in spec.months:
            for number in range(1, calendar.monthrange(year, month)[1] + 1):
                day = date(year, month, number)
                if first <= day <= last and spec.matches_date(day):
                    yield day
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)


def _day_ticks(spec: CronSpec, tz: tzinfo, day: date, after: datetime, until: datetime, cap: int) -> list[datetime]:
    """The instants of one matching local date that fall in (after, until].

    On a date with one offset all day (every date in UTC), the instants are midnight plus
    the sorted offsets, so two bisections pick the range, and only the first ``cap`` can
    be among the first ``cap`` overall.
    """
    offsets = (timedelta(0),) if tz is UTC else _day_offsets(tz, day)
    if max(offsets) != min(offsets):
        return _transition_day_ticks(spec, tz, day, after, until, cap)
    midnight = datetime.combine(day, time(), tzinfo=UTC) - offsets[0]
    low = bisect.bisect_right(spec.offsets, after - midnight)
    high = bisect.bisect_right(spec.offsets, until - midnight)
    return [midnight + step for step in spec.offsets[low : min(high, low + cap)]]


def _transition_day_ticks(
    spec: CronSpec, tz: tzinfo, day: date, after: datetime, until: datetime, cap: int
) -> list[datetime]:
    """The instants of a local date on which the clocks change, in (after, until].

    1. Bound the wall times worth resolving: a tick's wall time is at most the day's
       shift from the wall-clock reading of its instant (a repeat runs the clock back, a
       gap pushes a fixed time forward), so widen the window's reading by twice the shift.
    2. Resolve each wall time in it through ``local_instants``; keep those in range.
    3. Once ``cap`` distinct instants are in hand, wall times more than twice the shift
       later can only give later instants, so stop there.
    """
    midnight, margin = datetime.combine(day, time()), 2 * _day_shift(tz, day)
    low = bisect.bisect_left(spec.offsets, _wall(after, tz) - midnight - margin)
    high = bisect.bisect_right(spec.offsets, _wall(until, tz) - midnight + margin)
    found: dict[datetime, None] = {}  # ordered set: gap times share one instant
    enough: timedelta | None = None
    for step in spec.offsets[low:high]:
        if enough is not None and step > enough + margin:
            break
        for instant in local_instants(tz, midnight + step, fixed_time=spec.fixed_time):
            if after < instant <= until:
                found[instant] = None
        if enough is None and len(found) >= cap:
            enough = step
    return list(found)


def _wall(moment: datetime, tz: tzinfo) -> datetime:
    return moment.astimezone(tz).replace(tzinfo=None)
