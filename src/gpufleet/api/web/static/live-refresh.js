// Live refresh without a full reload: a page marked <main data-refresh-s="N"> fetches its own
// URL every N seconds and swaps in each element marked data-live (matched by id). Forms,
// focus and scroll stay as they are; a failed fetch leaves the page and says so.
(function () {
  const main = document.querySelector("main[data-refresh-s]");
  if (!main) return;
  const periodMs = Math.max(5, Number(main.dataset.refreshS) || 30) * 1000;
  const status = document.getElementById("live-status");
  async function refresh() {
    if (document.hidden) return;
    try {
      const response = await fetch(window.location.href, {credentials: "same-origin",
                                                           headers: {"X-Live-Refresh": "1"}});
      if (response.redirected || !response.ok) throw new Error(String(response.status));
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      page.querySelectorAll("[data-live][id]").forEach((fresh) => {
        const old = document.getElementById(fresh.id);
        if (old) old.replaceWith(document.importNode(fresh, true));
      });
      if (typeof localiseTimes === "function") localiseTimes(document);
      if (status) status.textContent = "Updated " + new Date().toLocaleTimeString();
    } catch (err) {
      if (status) status.textContent = "Live refresh paused: " + err.message;
    }
  }
  setInterval(refresh, periodMs);
})();
