// Shows each <time datetime> (and each chart axis label with data-datetime) in the viewer's
// time zone. The page is complete without it: the server writes the UTC time as the text.
function localiseTimes(root) {
  root.querySelectorAll("time[datetime], [data-datetime]").forEach((el) => {
    const when = new Date(el.getAttribute("datetime") || el.getAttribute("data-datetime"));
    if (Number.isNaN(when.getTime()) || el.dataset.localised) return;
    el.dataset.localised = "1";
    if (el.tagName.toLowerCase() === "time") el.title = el.textContent;
    el.textContent = when.toLocaleString(undefined, {dateStyle: "medium", timeStyle: "short"});
  });
}
localiseTimes(document);
