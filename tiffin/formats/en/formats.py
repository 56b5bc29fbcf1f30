"""Dates and instants in the admin, for English (the only language here).

Django's English default writes an instant as "Nov. 22, 2026, 6:30 p.m.", which does not
say its zone: for an Indian week that begins at 18:30 UTC on the Sunday before it reads as
a wrong local time. Every instant is stored and shown in UTC (TIME_ZONE), so it is written
with the zone's name ("2026-11-22 18:30 UTC"); local times are shown only beside it, by the
pages that convert them. A date is a calendar date, with its weekday ("Mon 23 Nov 2026").
"""

DATETIME_FORMAT = "Y-m-d H:i T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i T"
DATE_FORMAT = "D j M Y"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i"
