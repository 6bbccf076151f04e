// collabui's synthetic form pages: a seeded generator of small forms and the instruction that
// fills them, rewarded through MiniWoB++'s core (core.endEpisode), so the MiniWoB environment,
// the verified search and the evaluation drive them unchanged. synth.generate(kind) builds one:
//   fields  - 2-4 labelled text fields (and maybe a menu); fill 1-3 of them
//   choices - radio groups, checkbox lists and menus; choose in 1-2 of them
//   forms   - any of the widgets above; 2-3 goals
// Every goal is followed by a submit click; the reward is +1 only if every widget holds what the
// instruction asked (untouched widgets stay empty), -1 otherwise or on a distractor button.
var synth = {};

synth.FIELD_LABELS = ['First name', 'Last name', 'Email', 'City', 'Username', 'Password', 'Phone',
  'Company', 'Title', 'Nickname', 'Zip code', 'Street', 'Country', 'Code', 'Comment', 'Website',
  'Age', 'Job', 'School', 'Team', 'Pet name', 'Color', 'Coupon', 'Reference', 'PIN'];
synth.SECRET = ['Password', 'PIN'];
synth.GROUPS = {
  'Size': ['Small', 'Medium', 'Large', 'Huge', 'Tiny'],
  'Color': ['Red', 'Blue', 'Green', 'Black', 'White', 'Yellow', 'Pink'],
  'Plan': ['Basic', 'Standard', 'Premium', 'Family', 'Student'],
  'Delivery': ['Pickup', 'Courier', 'Post', 'Locker', 'Express'],
  'Topics': ['Sports', 'Music', 'Travel', 'Food', 'Movies', 'Science', 'Art'],
  'Days': ['Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'],
  'Payment': ['Card', 'Cash', 'Transfer', 'Voucher'],
  'Language': ['English', 'Spanish', 'French', 'German', 'Hindi', 'Arabic'],
};
synth.WORDS = ['river', 'maple', 'orbit', 'velvet', 'copper', 'lantern', 'meadow', 'harbor',
  'pixel', 'cobalt', 'saffron', 'willow', 'ember', 'falcon', 'granite', 'juniper', 'nova', 'quartz'];
synth.SUBMIT = ['Submit', 'Send', 'Save', 'OK', 'Done', 'Continue', 'Confirm'];
synth.DISTRACT = ['Cancel', 'Clear', 'Back', 'Reset', 'Help', 'Skip'];
synth.TITLES = ['Sign up', 'Your order', 'Profile', 'Settings', 'Survey', 'Booking', 'Contact'];

synth.pick = function (list, n) { return core.shuffle(list.slice()).slice(0, n); };
synth.lower = function (s) { return core.randf(0, 1) < 0.5 ? s.toLowerCase() : s; };
synth.el = function (tag, attrs, text) {
  var e = document.createElement(tag);
  for (var k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
};
synth.value = function () {
  var r = core.randf(0, 1);
  if (r < 0.4) return core.sample(synth.WORDS);
  if (r < 0.7) return ui_utils.generateString(3, 8);
  return String(core.randi(10, 99999));
};

// ---------------------------------------------------------------- widgets

synth.textField = function (area, label, n) {
  var row = synth.el('div', {});
  var id = 'f' + n;
  var input = synth.el('input', {type: synth.SECRET.indexOf(label) >= 0 ? 'password' : 'text', id: id});
  var layout = core.randi(0, 4);
  if (layout === 0) { row.appendChild(synth.el('label', {'for': id}, label + ':')); row.appendChild(input); }
  else if (layout === 1) { var l = synth.el('label', {}, label + ' '); l.appendChild(input); row.appendChild(l); }
  else if (layout === 2) { row.appendChild(input); row.appendChild(synth.el('span', {}, ' ' + label)); }
  else { row.appendChild(synth.el('span', {}, label)); row.appendChild(synth.el('br', {})); row.appendChild(input); }
  area.appendChild(row);
  return {kind: 'text', label: label, input: input, want: ''};
};

synth.choiceGroup = function (area, kind, caption, n) {
  var words = synth.GROUPS[caption];
  var count = core.randi(2, 6);
  // Half the lists use the group's words, half made-up strings (no prior knowledge helps).
  var names = core.randf(0, 1) < 0.5 ? synth.pick(words, Math.min(count, words.length))
    : Array.apply(null, Array(count)).map(function () { return ui_utils.generateString(2, 7); });
  var box = synth.el('div', {});
  box.appendChild(synth.el('div', {'class': 'bold'}, caption));
  var inputs = names.map(function (name, i) {
    var input = synth.el('input', {type: kind, name: 'g' + n, id: 'g' + n + '_' + i});
    if (core.randf(0, 1) < 0.5) {
      var l = synth.el('label', {}); l.appendChild(input); l.appendChild(document.createTextNode(' ' + name));
      box.appendChild(l);
    } else {
      box.appendChild(input); box.appendChild(synth.el('label', {'for': 'g' + n + '_' + i}, name));
    }
    box.appendChild(synth.el('br', {}));
    return input;
  });
  area.appendChild(box);
  return {kind: kind, label: caption, names: names, inputs: inputs, want: kind === 'radio' ? null : []};
};

synth.menu = function (area, caption, n) {
  var words = synth.GROUPS[caption];
  var names = synth.pick(words, Math.min(core.randi(3, 6), words.length));
  var row = synth.el('div', {});
  var select = synth.el('select', {id: 'm' + n});
  select.appendChild(synth.el('option', {value: ''}, '--'));
  names.forEach(function (name) { select.appendChild(synth.el('option', {value: name}, name)); });
  row.appendChild(synth.el('label', {'for': 'm' + n}, caption + ' '));
  row.appendChild(select);
  area.appendChild(row);
  return {kind: 'select', label: caption, names: names, input: select, want: ''};
};

// ---------------------------------------------------------------- goals

synth.goalText = function (w) {
  w.want = synth.value();
  var L = synth.lower(w.label);
  return core.sample(['enter "' + w.want + '" into the ' + L + ' field', 'type "' + w.want + '" in ' + L,
    'fill ' + L + ' with "' + w.want + '"', 'put "' + w.want + '" in the ' + L + ' box',
    'set ' + L + ' to "' + w.want + '"']);
};
synth.goalRadio = function (w) {
  w.want = core.sample(w.names);
  return core.sample(['select ' + w.want, 'choose ' + w.want + ' for ' + synth.lower(w.label),
    'pick the ' + w.want + ' option', 'mark ' + w.want]);
};
synth.goalCheck = function (w) {
  w.want = synth.pick(w.names, core.randi(1, Math.min(3, w.names.length) + 1));
  var list = w.want.length === 1 ? w.want[0]
    : w.want.slice(0, -1).join(', ') + ' and ' + w.want[w.want.length - 1];
  return core.sample(['check ' + list, 'tick ' + list, 'select ' + list + ' under ' + synth.lower(w.label)]);
};
synth.goalMenu = function (w) {
  w.want = core.sample(w.names);
  var L = synth.lower(w.label);
  return core.sample(['pick ' + w.want + ' from ' + L, 'choose ' + w.want + ' in the ' + L + ' menu',
    'set ' + L + ' to ' + w.want]);
};
synth.GOALS = {text: synth.goalText, radio: synth.goalRadio, checkbox: synth.goalCheck, select: synth.goalMenu};

synth.satisfied = function (w) {
  if (w.kind === 'text') return w.input.value === w.want;
  if (w.kind === 'select') return w.input.value === w.want;
  var checked = w.inputs.map(function (x, i) { return x.checked ? w.names[i] : null; })
    .filter(function (x) { return x !== null; });
  if (w.kind === 'radio') return w.want === null ? checked.length === 0 : (checked.length === 1 && checked[0] === w.want);
  return checked.length === w.want.length && w.want.every(function (x) { return checked.indexOf(x) >= 0; });
};

// ---------------------------------------------------------------- page

synth.widgets = function (area, kind) {
  var out = [], n = 0;
  var captions = core.shuffle(Object.keys(synth.GROUPS));
  var labels = synth.pick(synth.FIELD_LABELS, 4);
  var plan;
  if (kind === 'fields') {
    plan = labels.slice(0, core.randi(2, 5)).map(function () { return 'text'; });
    if (core.randf(0, 1) < 0.3) plan.push('select');
  } else if (kind === 'choices') {
    plan = [core.sample(['radio', 'checkbox', 'select'])];
    if (core.randf(0, 1) < 0.6) plan.push(core.sample(['radio', 'checkbox', 'select']));
  } else if (kind === 'forms') {
    plan = core.shuffle(['text', 'text', core.sample(['radio', 'checkbox']), 'select']).slice(0, core.randi(2, 5));
  } else {
    throw new Error('unknown synthetic page kind ' + kind);
  }
  plan.forEach(function (w) {
    n += 1;
    if (w === 'text') out.push(synth.textField(area, labels.shift(), n));
    else if (w === 'select') out.push(synth.menu(area, captions.shift(), n));
    else out.push(synth.choiceGroup(area, w, captions.shift(), n));
  });
  return out;
};

synth.generate = function (kind) {
  var area = document.getElementById('area');
  area.innerHTML = '';
  if (core.randf(0, 1) < 0.4) area.appendChild(synth.el('div', {'class': 'bold'}, core.sample(synth.TITLES)));
  var widgets = synth.widgets(area, kind);
  var goals = synth.pick(widgets, Math.min(widgets.length, kind === 'forms' ? core.randi(2, 4) : core.randi(1, 3)));
  var parts = widgets.filter(function (w) { return goals.indexOf(w) >= 0; })
    .map(function (w) { return synth.GOALS[w.kind](w); });
  var submit = core.sample(synth.SUBMIT);
  var buttons = [submit].concat(synth.pick(synth.DISTRACT, core.randi(0, 3)));
  var row = synth.el('div', {});
  core.shuffle(buttons).forEach(function (name) {
    var b = synth.el('button', {}, name);
    b.onclick = function () {
      if (name !== submit) { core.endEpisode(-1, false, 'clicked ' + name); return; }
      var wrong = widgets.filter(function (w) { return !synth.satisfied(w); }).map(function (w) { return w.label; });
      core.endEpisode(wrong.length ? -1 : 1, false, wrong.length ? 'wrong: ' + wrong.join(', ') : 'all set');
    };
    row.appendChild(b);
  });
  area.appendChild(row);
  var text = parts.length > 1 ? parts.slice(0, -1).join(', ') + ' and ' + parts[parts.length - 1] : parts[0];
  var ends = [', then press ' + submit, ', then click the ' + submit + ' button'];
  if (text.indexOf(' and ') < 0) ends.push(' and click ' + submit);
  var end = core.sample(ends);
  document.getElementById('query').textContent = text.charAt(0).toUpperCase() + text.slice(1) + end + '.';
};
