// Fleet map tiles are plain links (no React component each: a map holds thousands). A plain
// left click on one opens the cluster page in place, as a dcc.Link does: push the address and
// tell Dash's dcc.Location. Modified clicks (new tab, new window) keep the browser's default.
document.addEventListener("click", function (event) {
    var tile = event.target.closest ? event.target.closest("#fleet-map a.tile") : null;
    if (!tile || event.defaultPrevented || event.button !== 0 ||
        event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) {
        return;
    }
    event.preventDefault();
    window.history.pushState({}, "", tile.getAttribute("href"));
    window.dispatchEvent(new CustomEvent("_dashprivate_pushstate"));
    window.scrollTo(0, 0);
});
