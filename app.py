"""kvplan web app: `streamlit run app.py`.

Estimate, Compare strategies, Capacity, Compare setups, Recommend, Validation and Learn pages (app_pages/). The model and the workload
are chosen once, in the sidebar, and every page's state lives in the URL so a plan can be shared. No numbers
are computed here or in the pages: they come from kvplan through the app's helpers (app_pages.support, app_pages.charts,
kvplan.cache.strategies).
"""

import streamlit as st

from app_pages import common

st.set_page_config(page_title="kvplan: KV-cache planner", page_icon=":material/memory:", layout="wide")

PAGES = [
    st.Page("app_pages/estimate.py", title="Estimate", icon=":material/calculate:", default=True),
    st.Page("app_pages/compare.py", title="Compare strategies", icon=":material/compare_arrows:", url_path="compare"),
    st.Page("app_pages/capacity.py", title="Capacity", icon=":material/dns:", url_path="capacity"),
    st.Page("app_pages/setups.py", title="Compare setups", icon=":material/view_column:", url_path="setups"),
    st.Page("app_pages/recommend.py", title="Recommend", icon=":material/recommend:", url_path="recommend"),
    st.Page("app_pages/validation.py", title="Validation", icon=":material/fact_check:", url_path="validation"),
    st.Page("app_pages/learn.py", title="Learn", icon=":material/school:", url_path="learn"),
]

page = st.navigation(PAGES, position="top")
common.style()
common.run_page(page)
