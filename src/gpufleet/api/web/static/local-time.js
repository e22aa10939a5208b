// Shows each <time datetime> (and each chart axis label with data-datetime) in the viewer's
// time zone. The page is complete without it: the server writes the UTC time as the text.
function localiseTimes(root) {
  root.querySelectorAll("time[datetime], [data-datetime]").forEach((el) => {
    const when = new Date(el.getAttribute("datetime") || el.getAttribute("data-datetime"));
    if (Number.isNaN(when.getTime()) || el.dataset.localised) return;
    el.dataset.localised = "1";
    if (el.tagName.toLowerCase() === "time") el.title = el.textContent;
    // A time the server wrote to the second (the Audit page's) keeps its seconds.
    const seconds = /\d:\d\d:\d\d/.test(el.textContent);
    el.textContent = when.toLocaleString(undefined,
                                         {dateStyle: "medium", timeStyle: seconds ? "medium" : "short"});
  });
}
localiseTimes(document);
