"""The word lists and patterns fact units are read with: stopwords, words, entities, numbers and
dates, preference verbs, pleasantries, leading interjections and hedges (:mod:`vcm.tasks.summary.units`)."""

from __future__ import annotations

import re

from vcm.tasks.summary import sentences

STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "i'm",
        "i've",
        "i'll",
        "i'd",
        "you're",
        "you've",
        "you'll",
        "it's",
        "that's",
        "there's",
        "what's",
        "let's",
        "don't",
        "didn't",
        "doesn't",
        "can't",
        "won't",
        "isn't",
        "wasn't",
        "aren't",
        "haven't",
        "hasn't",
        "couldn't",
        "wouldn't",
        "shouldn't",
        "he's",
        "she's",
        "they're",
        "we're",
        "we've",
        "they've",
        "one",
        "really",
        "much",
        "many",
        "lot",
        "lots",
        "well",
        "yeah",
        "yes",
        "yep",
        "hey",
        "hi",
        "hello",
        "wow",
        "oh",
        "ok",
        "okay",
        "thanks",
        "thank",
        "sure",
        "cool",
        "great",
        "awesome",
        "nice",
        "glad",
        "amazing",
        "good",
        "super",
        "totally",
        "absolutely",
        "definitely",
        "especially",
        "sounds",
        "sound",
        "seems",
        "seem",
        "like",
        "get",
        "got",
        "gonna",
        "wanna",
        "thing",
        "things",
        "stuff",
        "way",
        "always",
        "never",
        "ever",
        "still",
        "even",
        "though",
        "something",
        "anything",
        "everything",
        "someone",
        "anyone",
        "everyone",
        "time",
        "feel",
        "felt",
        "know",
        "think",
        "see",
        "make",
        "made",
        "go",
        "going",
        "went",
        "come",
        "came",
        "say",
        "said",
        "tell",
        "told",
    ]
)


WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'\-]*")


ENTITY = re.compile(r"(?<=[\s,;:(\"'])[A-Z][A-Za-z]+(?:[-'][A-Za-z]+)?\b")


# LEADS: the patterns below that list words start with a lookahead for the words' first letters.
# It is implied by any match, so it changes none; it lets the search pass over positions where
# no word can start without trying each alternative (and lookbehind) there: NUMBER, DATE and
# PREFERENCE took 12-16 us a LoCoMo sentence, HEDGE 29. tests/tasks/summary/test_lexicon.py
# checks that each finds what it finds without its lookahead.
LEADS = ("NUMBER", "DATE", "PREFERENCE", "HEDGE")


NUMBER = re.compile(
    r"(?=[\dotfsenhmd])"  # a word's first letter (see LEADS)
    r"\b(?:\d[\d,.:/]*|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|hundred"
    r"|thousand|million|first|second|third|half|dozen)\b",
    re.IGNORECASE,
)


DATE = re.compile(
    r"(?=[jfmasondtwycb])"  # a word's first letter (see LEADS)
    r"\b(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:tember)?|oct(?:ober)?"
    r"|nov(?:ember)?|dec(?:ember)?|monday|tuesday|wednesday|thursday|friday|saturday|sunday|yesterday|tomorrow"
    r"|tonight|weekend|week|month|year|summer|winter|spring|autumn|christmas|birthday)\b",
    re.IGNORECASE,
)


PREFERENCE = re.compile(
    r"(?=[lphefdgwbmsajvrc])"  # a word's first letter (see LEADS)
    r"\b(?:lov(?:e|es|ed|ing)|lik(?:e|es|ed)|prefer(?:s|red)?|hat(?:e|es|ed)|enjoy(?:s|ed)?|favou?rite|decid(?:e|ed|es)"
    r"|plan(?:s|ned|ning)?|going to|will|want(?:s|ed)?|bought|moved|started|adopted|joined|signed|married|graduated"
    r"|work(?:s|ed|ing)?|job|volunteer(?:s|ed|ing)?|learn(?:ed|ing)?|visit(?:s|ed|ing)?|ran|won|lost|made|built|"
    r"finished|researching|hope|dream|goal|allergic|vegetarian|vegan|chose|agreed|promised|booked)\b",
    re.IGNORECASE,
)


# Sign-offs, thanks, sympathy and cheering that open a sentence: what follows them is about the
# listener, not a fact of the speaker's.
PLEASANTRY = re.compile(
    r"^(?:take care|stay (?:safe|strong|tuned)|have (?:fun|a (?:good|great|nice) \w+)|enjoy (?:it|your|the rest)"
    r"|(?:good|best of) luck|keep (?:it )?up|keep (?:me|ya|you) (?:posted|updated)|(?:will|i'll) keep (?:ya|you) posted"
    r"|(?:chat|talk|speak) (?:soon|later)|see (?:ya|you)|catch (?:ya|you)|bye|goodbye|congrat(?:s|ulations)|cheers"
    r"|sorry (?:to hear|about)|appreciate (?:it|that|the|your|you)|you(?:'ve)? got this|you can do it"
    r"|spill (?:the )?beans|your (?:kind )?words"
    r"|tell me more|can't wait to (?:see|hear)|let me know|me too|same here|agreed|i (?:100% )?agree|of course"
    r"|no (?:problem|worries)|you're welcome|my pleasure|will do|hope (?:you|your|it|that|they)"
    r"|wish(?:ing)? you|proud of you|happy for you|glad (?:you|to hear|it)|thanks|thank you)\b",
    re.IGNORECASE,
)


# Greetings, interjections and reactions at the start of a sentence; hedges anywhere.
LEAD = re.compile(
    r"^(?:(?:hey|hi|hello|wow|whoa|oh|ooh|aw+|yeah|yes|yep|yup|ok|okay|well|so|haha|lol|omg|thanks|thank you"
    r"|cool|great|awesome|nice|sure|totally|absolutely|really|definitely|gosh|man|dude|hmm+|ah+|um+|uh+)\b"
    r"(?:\s+(?-i:[A-Z][a-z]+)(?=[,!.]))?[\s,!.\-]*)+",
    re.IGNORECASE,
)


_HEDGES = (
    r"you know|i mean|kind of|sort of|to be honest|honestly|actually|basically|literally|really|just|totally"
    r"|pretty much"
)
HEDGE = re.compile(
    # Not where the words carry the meaning: "let you know", "did you know", "what kind of music".
    r"(?=[yikstablrjph])"  # a word's first letter (see LEADS)
    r"(?<!\blet )(?<!\bdid )(?<!\bdo )(?<!\bif )(?<!\bwhat )(?<!\bwhich )(?<!\bthis )(?<!\bthat )(?<!\bthe )"
    r"(?<!\bsome )(?<!\bany )(?<!\ba )(?<!\bsame )"
    r"\b(?:" + _HEDGES + r")\b,?\s*",
    re.IGNORECASE,
)
# HEDGE without its lookbehinds: a text it finds nothing in holds no match of HEDGE, and is left
# alone unsearched (nine LoCoMo sentences in ten; 1.5 us a sentence where HEDGE costs 5.6).
HEDGE_WORDS = re.compile(r"\b(?=[yikstablrjph])(?:" + _HEDGES + ")", re.IGNORECASE)


# Capitalised for grammar, not because they name something: the sentence module's list, plus the
# interjections that open chat turns.
COMMON_CAPS = sentences.COMMON_CAPS | frozenset(
    [
        "Aw",
        "Awesome",
        "Cool",
        "Glad",
        "Great",
        "Haha",
        "Hey",
        "Lol",
        "Nice",
        "Oh",
        "Omg",
        "Sounds",
        "Thank",
        "Wow",
        "Yeah",
    ]
)
