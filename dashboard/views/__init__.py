"""Page pieces: plain functions from query rows to Dash components, one module per page.

Everything that comes from events (cluster ids, target names, hosts, reasons, summaries) is
untrusted. It only ever becomes the text child of an html component, which React renders as a
text node; strings that go into a plotly figure, which understands a little HTML, are escaped.

`formatting` turns ages, times and numbers into text; `elements` holds the pieces every page
builds with (tables, cards, cluster links); `fleet`, `cluster`, `alerts`, `identity`,
`deliveries` and `pipeline` each draw the page of that name.
"""

__all__: list[str] = []
