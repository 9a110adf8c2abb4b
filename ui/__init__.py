"""The Streamlit app's pieces, wired by app.py: state (widgets ↔ plan), sidebar (the inputs), tabs, charts."""
