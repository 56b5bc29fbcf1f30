"""The cron explainer's page: public at /cron/ (it reads no data), under the admin's look.
Staff reach it from the admin too; visitors who are not staff are held to a rate cap."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.views.decorators.http import require_safe

from explainer.explain import MAX_COUNT, cron_explain
from scheduling import cron
from tiffin import clock
from tiffin.client_ip import client_ip_address
from tiffin.ratelimit import rate_exceeded

DEFAULT_FIRE_TIMES = 5


class CronExplainForm(forms.Form):
    expression = forms.CharField(
        max_length=cron.MAX_EXPRESSION_LENGTH, help_text="Five fields: minute hour day-of-month month day-of-week."
    )
    zone = forms.CharField(
        max_length=64, required=False, initial="UTC", help_text="The IANA time zone it runs in, e.g. Europe/London."
    )
    count = forms.IntegerField(
        min_value=1, max_value=MAX_COUNT, required=False, initial=DEFAULT_FIRE_TIMES, help_text="Fire times to list."
    )

    def clean_zone(self) -> str:
        name: str = self.cleaned_data.get("zone") or "UTC"
        try:
            cron.zone(name)
        except cron.CronError as error:
            raise forms.ValidationError(str(error)) from None
        return name


@dataclass(frozen=True)
class TypedField:
    """One whitespace-separated token of what was typed, under the field name it fills."""

    name: str
    text: str
    bad: bool


@require_safe
def cron_explainer_public(request: HttpRequest) -> HttpResponse:
    """The explainer for anyone, logged in or not, under the admin's look. Visitors who
    are not staff are held to settings.CRON_EXPLAINER_REQUESTS_PER_MINUTE per client
    address (``tiffin.client_ip``), counted in the database so every process and server
    shares the count (``tiffin.ratelimit``)."""
    if not request.user.is_staff and _over_rate(request):
        response = HttpResponse(
            "Too many explanations asked from your address in the last minute: wait a minute and try again.",
            status=429,
            content_type="text/plain; charset=utf-8",
        )
        response["Retry-After"] = "60"
        return response
    return cron_explainer(request, context=admin.site.each_context(request))


def _over_rate(request: HttpRequest) -> bool:
    return rate_exceeded(
        cap="cron-explainer",
        client=client_ip_address(request),
        limit=settings.CRON_EXPLAINER_REQUESTS_PER_MINUTE,
        now=clock.now(),
    )


def cron_explainer(request: HttpRequest, *, context: dict[str, Any]) -> HttpResponse:
    """The explainer page: a GET form (its URL can be shared), the explanation below; the
    page's script asks again as the expression is typed and swaps in the new answer.

    Whatever is typed, the answer is this page: a bad expression or zone becomes an error
    on its field, naming the cron field at fault (a 500 here would be a bug).
    """
    form = CronExplainForm(request.GET if "expression" in request.GET else None)
    explanation, typed, suggestion = None, [], None
    if form.is_valid():
        data = form.cleaned_data
        try:
            explanation = cron_explain(
                expr=data["expression"], tz=data["zone"], count=data["count"] or DEFAULT_FIRE_TIMES, after=clock.now()
            )
        except cron.CronError as error:
            typed = _typed_fields(data["expression"], bad=error.field)
            suggestion = getattr(error, "suggestion", None)
            form.add_error("expression", str(error))  # (drops it from cleaned_data)
    elif form.is_bound and "zone" in form.errors and "expression" in form.cleaned_data:
        # A bad zone must not hide a bad expression: both are reported at once.
        try:
            cron.validate(form.cleaned_data["expression"])
        except cron.CronError as error:
            typed = _typed_fields(form.cleaned_data["expression"], bad=error.field)
            suggestion = getattr(error, "suggestion", None)
            form.add_error("expression", str(error))
    context.update(
        {
            "title": "Cron explainer",
            "form": form,
            "explanation": explanation,
            "typed": typed,
            "suggestion": suggestion,
            "zone": form.cleaned_data.get("zone", "UTC") if form.is_bound else "UTC",
        }
    )
    return TemplateResponse(request, "explainer/explainer.html", context)


def _typed_fields(expression: str, *, bad: str | None) -> list[TypedField]:
    """The typed tokens under their field names, the one at fault marked (five tokens only)."""
    tokens = expression.split()
    if bad is None or len(tokens) != len(cron.FIELD_NAMES):
        return []
    return [TypedField(name, text, name == bad) for name, text in zip(cron.FIELD_NAMES, tokens, strict=True)]
