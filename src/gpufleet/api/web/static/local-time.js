// Shows each <time datetime> in the viewer's time zone. The page is complete without it:
// the server writes the UTC time as the element's text.
document.querySelectorAll("time[datetime]").forEach((el) => {
  const when = new Date(el.getAttribute("datetime"));
  if (!Number.isNaN(when.getTime())) {
    el.title = el.textContent;
    el.textContent = when.toLocaleString(undefined, {dateStyle: "medium", timeStyle: "short"});
  }
});
