'use strict'

/**
 * Reading the project's Markdown the way GitHub renders it, for the tests
 * that keep the docs honest: which pages there are, their runnable blocks,
 * their relative links and the anchors their headings get.
 */

const fs = require('fs')
const path = require('path')

const ROOT = path.join(__dirname, '..', '..')

/** README.md, CHANGELOG.md and every docs/*.md, relative to the repository root. */
function markdownPages (root = ROOT) {
  const docs = path.join(root, 'docs')
  const pages = fs.existsSync(docs) ? fs.readdirSync(docs).filter((name) => name.endsWith('.md')).sort().map((name) => 'docs/' + name) : []
  return ['README.md', 'CHANGELOG.md', ...pages]
}

/**
 * Code blocks marked runnable: `<!-- doc-test: kind arg -->` (or 0.1's
 * `<!-- readme-test: ... -->`) on the line before a ```js fence.
 * @param {string} text
 * @returns {{ kind: string, arg: string, code: string, line: number }[]}
 */
function runnableBlocks (text) {
  return [...text.matchAll(/<!-- (?:doc|readme)-test: (\w+) ?(.*?) -->\n```js\n([\s\S]*?)```/g)]
    .map((m) => ({ kind: m[1], arg: m[2], code: m[3], line: text.slice(0, m.index).split('\n').length }))
}

/**
 * Markers that do not sit right above a ```js fence: such a block would be
 * silently skipped, so the tests count them as mistakes.
 */
function strayMarkers (text) {
  const all = [...text.matchAll(/<!-- (?:doc|readme)-test:[^\n]*/g)].length
  return all - runnableBlocks(text).length
}

/** The text without fenced code blocks, whose contents are not Markdown. */
function withoutCode (text) {
  return text.replace(/^[ \t]*(```+|~~~+)[^\n]*\n[\s\S]*?^[ \t]*\1[ \t]*$/gm, '')
}

/**
 * Every relative link of a page (Markdown links and <img src>), resolved:
 * `file` is the repository path it points at ('' for a same-page anchor),
 * `anchor` the part after '#', or null.
 * @param {string} page a path relative to the repository root
 * @param {string} text the page's Markdown
 */
function relativeLinks (page, text) {
  // Inline code shows link syntax without making a link.
  const prose = withoutCode(text).replace(/`[^`\n]*`/g, '')
  const targets = [...prose.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)|<(?:img|a) [^>]*(?:src|href)="([^"]+)"/g)].map((m) => m[1] || m[2])
  const links = []
  for (const target of targets) {
    if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue
    const hash = target.indexOf('#')
    const filePart = hash === -1 ? target : target.slice(0, hash)
    const anchor = hash === -1 ? null : decodeURIComponent(target.slice(hash + 1))
    const file = filePart === '' ? '' : path.posix.normalize(path.posix.join(path.posix.dirname(page), decodeURIComponent(filePart))).replace(/\/$/, '')
    links.push({ page, target, file, anchor })
  }
  return links
}

/**
 * The anchors GitHub gives a page: one per heading (lowercased, Markdown and
 * punctuation dropped, spaces to '-', a repeated slug gets -1, -2, ...), plus
 * explicit `<a id>` / `<a name>` anchors.
 * @param {string} text
 * @returns {Set<string>}
 */
function headingAnchors (text) {
  const anchors = new Set()
  const counts = new Map()
  const plain = withoutCode(text)
  for (const [, heading] of plain.matchAll(/^#{1,6}[ \t]+(.+?)[ \t#]*$/gm)) {
    const base = slug(heading)
    const count = counts.get(base) || 0
    counts.set(base, count + 1)
    anchors.add(count === 0 ? base : `${base}-${count}`)
  }
  for (const [, id] of plain.matchAll(/<a [^>]*(?:id|name)="([^"]+)"/g)) anchors.add(id)
  return anchors
}

/** GitHub's heading slug. */
function slug (heading) {
  return heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // a link or image keeps its text
    .replace(/<[^>]+>/g, '') // inline HTML tags are dropped, their text kept
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-')
}

module.exports = { ROOT, markdownPages, runnableBlocks, strayMarkers, withoutCode, relativeLinks, headingAnchors, slug }
