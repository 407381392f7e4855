"""The pages and the websocket: views, HTMX fragments, forms, the live reply and the context panels."""
