"""The interactive API page: `GET /docs`, Swagger UI over `/openapi.json`, its script, stylesheet and icon served
from this server (`/docs/assets/...`, the files the `fastapi-offline` package ships) rather than a CDN, so the page
works on a machine with no internet and makes no request elsewhere.

Owns: the page and its assets' route. Must not know: the schema (openapi.py), the other routes.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs/assets"


def assets_dir() -> Path | None:
    """Swagger UI's files (swagger-ui-bundle.js, swagger-ui.css, favicon.png), or None without the package."""
    try:
        import fastapi_offline
    except ImportError:
        return None
    return Path(fastapi_offline.__file__).parent / "static"


def add_docs(app: FastAPI) -> None:
    """`/docs` and its assets on `app`; nothing where Swagger UI's files are not installed (the server extra
    has them)."""
    folder = assets_dir()
    if folder is None or not folder.is_dir():
        return
    app.mount(ASSETS, StaticFiles(directory=folder), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(openapi_url=f"{root}{app.openapi_url}", title=f"{app.title}: API",
                                   swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
                                   swagger_favicon_url=f"{root}{ASSETS}/favicon.png")
