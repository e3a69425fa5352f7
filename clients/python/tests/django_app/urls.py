"""The test project's URLs."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import path

from floodgate.django import decision_of, degraded_model


def item(request: HttpRequest, item_id: int) -> JsonResponse:
    return JsonResponse({"item": item_id})


def model(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"model": degraded_model(decision_of(request), "large-model")})


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("items/<int:item_id>", item),
    path("model", model),
    path("healthz", healthz),
]
